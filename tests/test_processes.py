"""resnet_noBN/host/processes.py: a process runs until it ends; a zombie has ended; another
user's process (``os.kill`` refused) still runs."""

import os
import subprocess
import sys
import time

from resnet_noBN.host import processes


def test_this_process_runs_and_an_ended_one_does_not():
    assert processes.running(os.getpid())
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert not processes.running(int(ended.stdout))  # reaped: no such process


def test_a_zombie_has_ended():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        for _ in range(200):  # until it has exited and waits, unreaped, for its exit status
            with open(f"/proc/{child.pid}/stat", encoding="utf-8") as f:
                if f.read().rsplit(") ", 1)[1][0] == "Z":
                    break
            time.sleep(0.05)
        else:
            raise AssertionError("the child never became a zombie")
        assert not processes.running(child.pid)
    finally:
        assert child.wait() == 0


def test_another_users_process_runs(monkeypatch):
    def refused(pid, signum):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(processes.os, "kill", refused)
    assert processes.running(os.getpid())
    assert not processes.running(2**22 + 1)  # over Linux's largest process id: no /proc entry


def test_a_process_whose_name_is_not_utf8_runs():
    code = (  # prctl(PR_SET_NAME): the name /proc/PID/stat shows, any bytes
        "import ctypes, sys, time; ctypes.CDLL(None).prctl(15, b'\\xff\\xfe x', 0, 0, 0); "
        "print(flush=True); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        child.stdout.readline()  # named
        with open(f"/proc/{child.pid}/stat", "rb") as f:
            assert b"(\xff\xfe x)" in f.read()
        assert processes.running(child.pid)
    finally:
        child.kill()
        child.wait()
