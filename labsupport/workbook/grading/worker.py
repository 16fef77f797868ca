"""The student's side of grading: one plain Python process per submission.

Started by :class:`labsupport.workbook.grading.sandbox.Worker` as
``python -I -c BOOT LIBDIR REQ_FD RESP_FD`` in its own session, working folder and resource limits.
It reads requests from ``REQ_FD`` and answers on ``RESP_FD`` (length-prefixed JSON, never
pickle):

* ``exec``  — run one cell of the rebuilt notebook (setup cells from the instructor's exercise
  notebook, answer cells from the submission) in the notebook's namespace;
* ``call``  — call one of the student's functions with plain-data arguments and send back the
  plain-data result (and the arguments as the function left them);
* ``init``  — nothing to set up (kept so the grader knows the process is ready).

The checks themselves never run here: the grader runs them and calls into this process, and this
process's copy of ``labsupport.check`` holds stubs only.  Nothing this process says is trusted
beyond "your function returned this value": detection (flags, similarity) happens in the grader.
"""
from __future__ import annotations

import builtins
import io
import json
import os
import signal
import struct
import sys
import traceback
import warnings
from typing import Any
from labsupport.workbook.grading import codec

_HEADER = struct.Struct("<Q")
CELL_OUTPUT_CHARS = 4000


class CappedStream(io.TextIOBase):
    """stdout/stderr of the student's code: keeps the first ``CELL_OUTPUT_CHARS`` characters of
    each cell or call and counts the rest, so a huge output costs nothing."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._kept = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        room = CELL_OUTPUT_CHARS - self._kept
        if room > 0:
            self._parts.append(text[:room])
            self._kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def take(self) -> str:
        text = "".join(self._parts)
        if self.dropped:
            text += f"\n… {self.dropped} more characters of output not kept\n"
        self._parts, self._kept, self.dropped = [], 0, 0
        return text


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _send(fd: int, message: dict) -> None:
    data = json.dumps(message, ensure_ascii=False, allow_nan=True).encode("utf-8")
    os.write(fd, _HEADER.pack(len(data)))
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _where(tb) -> str:
    frames = [f for f in traceback.extract_tb(tb) if f.filename.startswith("<cell ")]
    if not frames:
        return "line ?"
    f = frames[-1]
    return f"line {f.lineno} of {f.filename.strip('<>')}"


def _raised(exc: BaseException) -> dict:
    bases = [c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c]
    chain, seen, not_implemented = exc, set(), False
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        not_implemented = not_implemented or isinstance(chain, NotImplementedError)
        chain = chain.__cause__ or chain.__context__
    try:
        message = str(exc)[:500]
    except Exception:  # noqa: BLE001 - a __str__ that raises
        message = "<unprintable>"
    return {"type": type(exc).__name__, "bases": bases, "message": message,
            "where": _where(exc.__traceback__), "not_implemented": not_implemented}


def main() -> None:
    req_fd, resp_fd = int(sys.argv[2]), int(sys.argv[3])
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized file write fails, it does not kill

    nproc = int(os.environ.pop("LABSUPPORT_GRADE_NPROC", "0") or 0)
    if nproc > 0:  # counted in this sandbox's user namespace; the hard limit cannot be raised again
        try:
            import resource  # noqa: PLC0415 - resource exists on Unix only

            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        except (ValueError, OSError):
            pass
    stream = CappedStream()
    sys.stdout = sys.stderr = stream
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": builtins}
    while True:
        try:
            (size,) = _HEADER.unpack(_read_exact(req_fd, _HEADER.size))
            request = json.loads(_read_exact(req_fd, size))
        except EOFError:
            os._exit(0)
        op = request.get("op")
        reply: dict[str, Any]
        if op == "init":
            reply = {"ok": True}
        elif op == "exec":
            reply = {"ok": True}
            try:
                code = compile(request["source"], f"<cell {request['cell']}>", "exec")
                exec(code, namespace)  # noqa: S102 - the student's cell, in its own process
            except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:
                reply = {"ok": False, "stop": type(exc).__name__, "error": f"{type(exc).__name__}: {exc}"}
            except BaseException as exc:  # noqa: BLE001
                info = _raised(exc)
                reply = {"ok": False, "error": f"{info['type']}: {info['message']} ({info['where']})"}
            reply["output"] = stream.take()
        elif op == "call":
            name = request["name"]
            try:
                fn = namespace.get(name)
                if not callable(fn):
                    raise NameError(f"name {name!r} is not defined (or not a function) after running your cells")
                args = codec.decode(request["args"])

                with warnings.catch_warnings(record=True) as caught:  # carried to the check, which may expect one
                    warnings.simplefilter("always")
                    result = fn(*args)
                payload = {"result": codec.encode(result), "args": codec.encode(list(args))}
                reply = {"ok": True, **payload}
            except BaseException as exc:  # noqa: BLE001 - reported to the grader, which re-raises it
                reply = {"ok": False, "raise": _raised(exc)}
                caught = []
            reply["warnings"] = [{"category": w.category.__name__, "message": str(w.message)[:500]}
                                 for w in caught[:20]]
            reply["output"] = stream.take()
        else:
            reply = {"ok": False, "error": f"unknown request {op!r}"}
        try:
            _send(resp_fd, reply)
        except (TypeError, ValueError) as exc:
            _send(resp_fd, {"ok": False, "raise": {"type": "TypeError", "bases": ["TypeError", "Exception"],
                                                   "message": f"the result cannot be sent to the grader: {exc}",
                                                   "where": "line ?", "not_implemented": False}})


if __name__ == "__main__":
    main()
