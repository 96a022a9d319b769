"""The transformers engine's warm worker: a process that has imported torch, Transformers and
PEFT, and nothing else, forking one child per run handed to it on a Unix socket
(docs/estimator.md Note [Warm worker]).

    python3 headroom_engine.py --serve SOCKET [--idle-s N]     (headroom-probe --serve starts it)
    HEADROOM_ENGINE_WORKER=SOCKET python3 headroom_engine.py --request ...   (a run handed to it)
"""
import json
import os
import signal
import socket
import struct
import sys
import time

from .protocol import EXIT_INTERNAL

MAX_HEADER = 4 << 20


_preload_s = []


def run_info():
    """What engine_info says of this process: the preload's seconds, and the warm worker it was
    forked from, if any."""
    out = {}
    if _preload_s:
        out["timing"] = {"preload": _preload_s[-1]}
    w = os.environ.get("HEADROOM_ENGINE_WORKER_INFO")
    if w:
        try:
            out["worker"] = json.loads(w)
        except ValueError:
            pass
    return out


def preload():
    """The imports a measurement needs, made before CUDA starts: in a fresh engine process and in
    the warm worker alike, so that both import the same modules in the same order (Note [Warm
    worker]). PEFT and Transformers are optional here; their absence is reported where they are
    needed."""
    import torch  # noqa: F401
    t0 = time.perf_counter()
    loaded = {"torch": torch.__version__}
    try:
        import transformers
        from transformers import AutoConfig, AutoModelForCausalLM  # noqa: F401  (the lazy module's real import)
        loaded["transformers"] = transformers.__version__
    except ImportError:
        pass
    try:
        import peft
        loaded["peft"] = peft.__version__
    except ImportError:
        pass
    _preload_s.append(round(time.perf_counter() - t0, 4))
    return loaded


def _stamp():
    """The files whose change makes the worker stale: each imported package's __init__."""
    out = {}
    for name in ("torch", "transformers", "peft"):
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None) if mod else None
        if f:
            try:
                out[name] = os.stat(f).st_mtime_ns
            except OSError:
                out[name] = None
    return out


def _send(conn, obj):
    data = json.dumps(obj).encode()
    conn.sendall(struct.pack("!I", len(data)) + data)


def _recv(conn):
    head = _recv_exact(conn, 4)
    if head is None:
        return None
    n = struct.unpack("!I", head)[0]
    if n > MAX_HEADER:
        raise ValueError(f"message of {n} bytes")
    body = _recv_exact(conn, n)
    return None if body is None else json.loads(body)


def _recv_request(conn):
    """The caller's request and its three file descriptors (they come with the first bytes), or
    (None, fds) when it is cut short or longer than MAX_HEADER."""
    msg, fds, _, _ = socket.recv_fds(conn, MAX_HEADER, 3)
    if len(msg) < 4:
        return None, fds
    n = struct.unpack("!I", msg[:4])[0]
    if n > MAX_HEADER:
        return None, fds
    body = msg[4:]
    if len(body) < n:
        rest = _recv_exact(conn, n - len(body))
        if rest is None:
            return None, fds
        body += rest
    return json.loads(body), fds


def _recv_exact(conn, n):
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def serve(path, idle_s=900):
    """Import, then fork one child per request until idle for idle_s seconds or stale."""
    import torch
    loaded = preload()
    stamp = _stamp()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if torch.cuda.is_initialized():
        print("headroom-engine: --serve: CUDA was initialised by an import; a worker cannot be honest", file=sys.stderr)
        return EXIT_INTERNAL
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, mode=0o700, exist_ok=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(path)
    finally:
        os.umask(old)
    srv.listen(4)
    srv.settimeout(idle_s)
    me = {"pid": os.getpid(), "started_at": started, "python": sys.version.split()[0], **loaded}
    print(json.dumps({"event": "worker_ready", "socket": path, **me}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (_cleanup(srv, path), os._exit(0)))
    try:
        while True:
            try:
                conn, _ = srv.accept()
            except socket.timeout:
                return 0
            with conn:
                _one(conn, me, stamp)
            if _stamp() != stamp:
                return 0
    finally:
        _cleanup(srv, path)


def _cleanup(srv, path):
    try:
        srv.close()
        os.unlink(path)
    except OSError:
        pass


def _one(conn, me, stamp):
    import torch
    try:
        req, fds = _recv_request(conn)
    except (OSError, ValueError):
        return
    try:
        if req is None:
            return
        if len(fds) != 3:
            _send(conn, {"refused": "the caller's three streams did not arrive"})
            return
        if _stamp() != stamp:
            _send(conn, {"refused": "stale: a library changed on disk since the worker imported it"})
            return
        if torch.cuda.is_initialized():
            _send(conn, {"refused": "CUDA is initialised in the worker"})
            return
        pid = os.fork()
        if pid == 0:
            code = EXIT_INTERNAL
            try:
                os.setsid()
                for i, fd in enumerate(fds):
                    os.dup2(fd, i)
                conn.close()
                os.chdir(req["cwd"])
                os.environ.clear()
                os.environ.update(req["env"])
                os.environ["HEADROOM_ENGINE_WORKER_INFO"] = json.dumps(me)
                os.environ.pop("HEADROOM_ENGINE_WORKER", None)
                sys.argv = [sys.argv[0]] + list(req["argv"])
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                from .main import main
                code = main(list(req["argv"]))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else EXIT_INTERNAL
            except BaseException as e:  # the protocol's internal error, on the caller's stderr
                try:
                    print(f"headroom-engine: internal error in the warm worker's child: {type(e).__name__}: {e}",
                          file=sys.stderr)
                except Exception:
                    pass
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                except Exception:
                    pass
                os._exit(code if isinstance(code, int) else EXIT_INTERNAL)
        _send(conn, {"pid": pid})
        _send(conn, {"exit": _wait_child(conn, pid)})
    except OSError:
        pass
    finally:
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass


def _wait_child(conn, pid):
    """The child's exit status. A caller that goes away (killed, its connection closed) takes its
    run with it: SIGTERM to the child, then SIGKILL after 10 s, so that no measurement outlives the
    process that asked for it."""
    import select
    gone_at = None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if gone_at is None:
            readable, _, _ = select.select([conn], [], [], 0.2)
            if readable:
                try:
                    data = conn.recv(1, socket.MSG_PEEK)
                except OSError:
                    data = b""
                if not data:
                    gone_at = time.monotonic()
                    os.kill(pid, signal.SIGTERM)
                else:
                    conn.recv(4096)  # the caller says nothing after its request: drop it
        else:
            time.sleep(0.2)
            if time.monotonic() - gone_at > 10:
                os.kill(pid, signal.SIGKILL)


def delegate(path, argv):
    """Run this engine call in the warm worker at path. Returns the exit status, or None when the
    worker cannot take it (then the caller runs it itself). Imports nothing heavy."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(2.0)
        conn.connect(path)
        body = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
        conn.settimeout(None)
        first = _recv(conn)
    except (OSError, ValueError):
        conn.close()
        return None
    if not first or "pid" not in first:
        conn.close()
        return None
    pid = first["pid"]

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        last = _recv(conn)
    except (OSError, ValueError):
        last = None
    finally:
        conn.close()
    if not last or "exit" not in last:
        print("headroom-engine: the warm worker went away during the run", file=sys.stderr)
        return EXIT_INTERNAL
    code = last["exit"]
    return 128 - code if code < 0 else code  # killed by a signal: the shell's 128 + N
