"""What the Python clients of the e2e tests share: a failed check prints FAIL and the reason, and exits 1."""
import sys


def fail(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
