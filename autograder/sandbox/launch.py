"""The sandboxed kernel's launch, in two halves, so that nbgrader autograde runs confined and only the launch is root's.

    server = LaunchServer(socket_path, connection_file, cwd, env, launches=1)  # in the grader (root), first
    server.start()
    ... nbgrader autograde, confined (confine.py), starts the kernelspec's argv, the client:
        python -m autograder.sandbox.launch SOCKET -f CONNECTION_FILE
    server.stop()                                                          # a kernel still running is killed

The sandbox's set-up needs root (the launcher, __main__.py, joins the cgroup, makes namespaces and mounts), and
Landlock forbids mounting in its domain: the launcher cannot be a child of a confined nbgrader. So the grader starts
it, on the client's request, and the client stands in for the kernel towards jupyter_client:

- The client connects to the server's socket (in a folder of the grader's own) and sends the connection file it was
  given, with its stdin, stdout and stderr (SCM_RIGHTS: the kernel writes into nbgrader's log as it did).
- The server starts the launcher only for a request it expects: from a process without any capability, with
  no_new_privs set and in the grader's own PID namespace (a confined nbgrader's child, not a kernel), naming the
  connection file the grader chose; one kernel at a time and `launches` in all. Everything else of the launch is the
  grader's: the argv, the working folder and the environment (a confined process's LD_PRELOAD or PYTHONPATH would
  run as root in the launcher). The first request it refuses ends it, and the client exits 1 saying why.
- SIGINT and SIGTERM sent to the client (jupyter_client's interrupt and terminate) are passed on to the launcher's
  process group, the kernel's and its ranks', as jupyter_client would have sent them; the client exits with the
  kernel's status. When the client's socket closes (jupyter_client's kill, nbgrader stopped at its time limit), the
  server kills the kernel: the kernel lives no longer than the process nbgrader knows as the kernel.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import stat
import struct
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

MAX_REQUEST = 4096  # bytes of a request: a connection file's path
STANDARD_STREAMS = 3  # stdin, stdout and stderr
# What the kernel's standard streams may be: jupyter_client gives a pipe for stdin and nbgrader's own stdout and
# stderr (a file, a pipe, a terminal, /dev/null); never a folder, through which the kernel could open paths.
STREAM_KINDS = (stat.S_ISREG, stat.S_ISFIFO, stat.S_ISCHR, stat.S_ISSOCK)
INTERRUPT, TERMINATE = b"INT", b"TERM"  # the client's messages after its request
SIGNALS = {INTERRUPT: signal.SIGINT, TERMINATE: signal.SIGTERM}
STARTED, REFUSED, EXITED = "started", "refused: ", "exit "  # the server's messages
PARENT_VARIABLE = "AUTOGRADER_LAUNCH_SERVER"  # the grader's pid, in the launcher's environment (__main__.py)


class Refused(Exception):
    """A request the server does not serve (the message says why)."""


def peer_refusal(conn: socket.socket) -> str | None:
    """Why the peer of `conn` may not have a kernel launched (None: it may): it must be the grader's uid, in the
    grader's PID namespace (a kernel is in one of its own), without any capability and with no_new_privs set."""
    pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.geteuid():
        return f"the client runs as uid {uid}, not as the grader"
    try:
        if os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid"):
            return "the client is in another PID namespace (a kernel's)"
        with open(f"/proc/{pid}/status") as fh:
            status = dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
    except OSError:
        return "the client is gone"
    if int(status["CapEff"], 16) or int(status["CapPrm"], 16) or status["NoNewPrivs"] != "1":
        return ("the client is not confined (it holds capabilities or may gain them): nbgrader must run confined "
                "(autograder/sandbox/confine.py)")
    return None


class LaunchServer(threading.Thread):
    """Starts the sandboxed kernel for the client (the module's docstring): `launches` kernels at most, one at a
    time, each with the launcher's argv on `connection_file`, in `cwd`, with `env`: all of them the grader's."""

    def __init__(self, path: Path, connection_file: Path, cwd: Path, env: Mapping[str, str], launches: int = 1):
        super().__init__(name=f"kernel launch server {path}", daemon=True)
        self.path = Path(path)  # in a folder of the grader's own, out of the kernel's reach
        self.connection_file, self.cwd, self.launches = str(connection_file), Path(cwd), launches
        # -P: the working folder is the notebook's, written by nbgrader; nothing there is imported as root.
        self.argv = [sys.executable, "-P", "-m", "autograder.sandbox", sys.executable, "-m", "ipykernel_launcher",
                     "-f", self.connection_file]
        self.env = {**env, PARENT_VARIABLE: str(os.getpid())}
        self.said: list[str] = []  # what it refused, for the grader's notes
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        self._listener.bind(str(self.path))
        self._listener.listen(1)
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC)  # written by stop(): the thread ends

    def run(self) -> None:
        try:
            for _ in range(self.launches):
                if not self._readable(self._listener):
                    return
                conn, _ = self._listener.accept()
                with conn:
                    if not self._readable(conn):  # stop() before its request came
                        return
                    try:
                        launcher = self._launch(conn)
                    except Refused as why:
                        self.said.append(str(why))
                        conn.send((REFUSED + str(why)).encode())
                        return
                    self._serve(conn, launcher)
        finally:
            self._listener.close()

    def stop(self) -> list[str]:
        """End the server, killing a kernel it started that still runs; return what it refused."""
        os.write(self._wake_w, b"x")
        if self.ident is not None:  # started
            self.join()
        self._listener.close()
        for fd in (self._wake_r, self._wake_w):
            os.close(fd)
        self.path.unlink(missing_ok=True)
        return self.said

    def _readable(self, sock: socket.socket) -> bool:
        """Wait until `sock` is readable (True) or stop() is called (False): a client that connects and says
        nothing holds the server only until the grader stops it."""
        with selectors.DefaultSelector() as sel:
            sel.register(sock, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            return all(key.fileobj is sock for key, _ in sel.select())

    def _launch(self, conn: socket.socket) -> subprocess.Popen:
        """Check the request on `conn` and start the launcher with its streams; Refused says why not."""
        request, fds, flags, _ = socket.recv_fds(conn, MAX_REQUEST, STANDARD_STREAMS, socket.MSG_CMSG_CLOEXEC)
        try:
            if why := peer_refusal(conn):
                raise Refused(why)
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != STANDARD_STREAMS:
                raise Refused(f"a request is a connection file and {STANDARD_STREAMS} streams, nothing more")
            if not all(any(kind(os.fstat(fd).st_mode) for kind in STREAM_KINDS) for fd in fds):
                raise Refused("a stream is not a file, a pipe, a socket or a device")
            try:
                named = json.loads(request)["connection_file"]
            except (ValueError, KeyError, TypeError):
                raise Refused("the request is not {\"connection_file\": ...}") from None
            if named != self.connection_file:
                raise Refused(f"the connection file {named!r} is not the one this grading chose")
            try:
                return subprocess.Popen(self.argv, stdin=fds[0], stdout=fds[1], stderr=fds[2], cwd=self.cwd,
                                        env=self.env, start_new_session=True)
            except OSError as exc:
                raise Refused(f"the launcher could not start: {exc}") from None
        finally:
            for fd in fds:
                os.close(fd)

    def _serve(self, conn: socket.socket, launcher: subprocess.Popen) -> None:
        """Pass the client's signals on to the launcher's process group, and its status back; kill it when the client
        goes, or stop() is called."""
        exited = os.pidfd_open(launcher.pid)
        try:
            conn.send(STARTED.encode())
            with selectors.DefaultSelector() as sel:
                for source in (conn, exited, self._wake_r):
                    sel.register(source, selectors.EVENT_READ)
                while True:
                    ready = {key.fileobj for key, _ in sel.select()}
                    if exited in ready:
                        conn.send(f"{EXITED}{launcher.wait()}".encode())
                        return
                    message = conn.recv(MAX_REQUEST) if conn in ready else b""
                    if message not in SIGNALS:  # the client is gone (or said what it may not), or stop()
                        return
                    os.killpg(launcher.pid, SIGNALS[message])  # not reaped yet: its group is still its own
        except OSError:  # the client went while the status was sent
            pass
        finally:
            if launcher.poll() is None:
                os.killpg(launcher.pid, signal.SIGKILL)  # the init dies with it, and the namespace with the init
                launcher.wait()
            os.close(exited)


def client(path: str, connection_file: str) -> int:
    """Ask the server at `path` to start the kernel on `connection_file`, pass it SIGINT and SIGTERM; return the
    kernel's exit status (as a shell reports one: 128 + N for a signal N), or 1 when refused."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC) as conn:
        try:
            conn.connect(path)
        except OSError as exc:  # no server, or it has launched all it would
            print(f"autograder sandbox: the kernel was not launched: no launch server at {path} ({exc.strerror})",
                  file=sys.stderr, flush=True)
            return 1
        for message, signum in SIGNALS.items():
            signal.signal(signum, lambda *_, message=message: conn.send(message))
        request = json.dumps({"connection_file": connection_file}).encode()
        socket.send_fds(conn, [request], list(range(STANDARD_STREAMS)))
        while reply := conn.recv(MAX_REQUEST).decode():
            if reply.startswith(REFUSED):
                print(f"autograder sandbox: the kernel was not launched: {reply}", file=sys.stderr, flush=True)
                return 1
            if reply.startswith(EXITED):
                code = int(reply[len(EXITED):])  # Popen's: -N for a signal N
                return code if code >= 0 else 128 - code
    return 1  # the server went without a status: the grader stopped it


if __name__ == "__main__":
    match sys.argv[1:]:
        case [path, "-f", connection_file]:
            sys.exit(client(path, connection_file))
        case _:
            sys.exit("usage: python -m autograder.sandbox.launch SOCKET -f CONNECTION_FILE")
