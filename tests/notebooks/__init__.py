"""The chapter notebooks as pages: structure, parameters, conventions, figures and tables."""
