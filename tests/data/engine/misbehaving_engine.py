"""An engine that breaks the protocol's promises on purpose, for headroom-probe's launcher tests
(issue 32, row 12). HEADROOM_ENGINE_SCRIPT points the probe here; HEADROOM_TEST_MISBEHAVE says how:
  error-code-0       an error event whose code is 0, then exit 0
  result-then-stop   the result line from $HEADROOM_TEST_RESULT, then death by SIGTERM
  result-then-orphan the result line, then exit 0 leaving a grandchild that holds stdout open
                     until $HEADROOM_TEST_RELEASE (a FIFO) is written to (issue 32, row 10)
"""
import os
import signal
import sys

how = os.environ.get("HEADROOM_TEST_MISBEHAVE", "")
if how == "error-code-0":
    print('{"event": "error", "code": 0, "message": "it went wrong, and said 0"}', flush=True)
    sys.exit(0)
if how == "result-then-stop":
    with open(os.environ["HEADROOM_TEST_RESULT"], encoding="utf-8") as f:
        sys.stdout.write(f.read().strip() + "\n")
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGTERM)
if how == "result-then-orphan":
    with open(os.environ["HEADROOM_TEST_RESULT"], encoding="utf-8") as f:
        sys.stdout.write(f.read().strip() + "\n")
    sys.stdout.flush()
    if os.fork() == 0:  # the grandchild: stdout inherited, blocked until the test releases it
        with open(os.environ["HEADROOM_TEST_RELEASE"], encoding="utf-8") as f:
            f.read()
        os._exit(0)
    sys.exit(0)
sys.exit(5)
