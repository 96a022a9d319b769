"""The probe protocol's side of the engine: exit codes, errors, stop signals, and the JSON lines
it writes (docs/probe-protocol.md). No torch."""
import json
import os
import sys
import threading


SCHEMA_VERSION = 1


EXIT_OK, EXIT_BAD_REQUEST, EXIT_OUT_OF_MEMORY, EXIT_NO_DEVICE, EXIT_INTERNAL = 0, 2, 3, 4, 5


MAX_REQUEST_BYTES = 64 << 20


MAX_DEPTH = 64


VERSION = "0.2.0"


class BadRequest(Exception):
    def __init__(self, field, value, why):
        super().__init__(f"{field} = {short(value)}: {why}")
        self.field = field


class Missing(Exception):
    """A device or package the request needs is not there: exit 4. `what` is "device" or
    "package", the error event's field: the explorer offers the CPU for a missing device only."""

    def __init__(self, message, what="package"):
        super().__init__(message)
        self.what = what


class Stopped(BaseException):
    """SIGTERM / SIGINT; a BaseException so that no library's `except Exception` swallows it."""


_stop = threading.Event()


_signal = [0]


_critical = [0]


def _on_signal(signum, _frame):
    _signal[0] = signum
    _stop.set()
    if not _critical[0]:
        raise Stopped()


def check_stop():
    if _stop.is_set():
        raise Stopped()


def short(v, n=80):
    """A value for a one-line message: control characters escaped, long values cut."""
    s = v if isinstance(v, str) else json.dumps(v, default=str)
    s = s.encode("unicode_escape").decode("ascii", "replace")
    return s if len(s) <= n else s[: n - 3] + "..."


def json_safe(obj):
    """obj with every non-finite float written as the string Python's json would have put bare
    ("Infinity", "-Infinity", "NaN"): a config may hold one (Mamba's time_step_limit is (0, inf)),
    and the protocol is strict JSON. Measured numbers are never non-finite; echoed configs can be."""
    if isinstance(obj, float) and obj != obj:
        return "NaN"
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "Infinity" if obj > 0 else "-Infinity"
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def dumps(obj, **kw):
    try:
        return json.dumps(obj, allow_nan=False, **kw)
    except ValueError:
        return json.dumps(json_safe(obj), allow_nan=False, **kw)


class Output:
    """JSON lines on stdout; a line is written whole, with SIGTERM held back meanwhile."""

    def __init__(self, quiet=False):
        self.quiet = quiet

    def emit(self, obj, force=False):
        if self.quiet and not force:
            return
        line = dumps(obj, separators=(",", ":")) + "\n"
        _critical[0] += 1
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        finally:
            _critical[0] -= 1


def write_atomically(path, obj, indent=1):
    tmp = f"{path}.tmp{os.getpid()}"
    _critical[0] += 1
    try:
        try:
            text = dumps(obj, indent=indent)
            with open(tmp, "w") as f:
                f.write(text)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    finally:
        _critical[0] -= 1
