"""The project as a whole: layout and layers, dependency lists, versions, data, benchmarks, entry points."""
