"""A headless Chromium process driven over the DevTools protocol on a pipe (no Playwright, no port).

Why not Playwright: its ``evaluate`` has no time bound (a hung render would hang the reward), it
starts a Node driver next to the browser, and its own browser download does not work here. The
DevTools protocol over ``--remote-debugging-pipe`` needs nothing but the browser: commands are JSON
objects terminated by a NUL byte, written to the browser's fd 3 and read back from its fd 4.

:class:`BrowserPipe` starts Debian's ``chromium`` in its own process group (so that killing it
takes its renderer and zygote processes along), sends commands with a deadline on every read and
write, and kills the group when the browser stops answering. Callers treat
:class:`BrowserTimeout` and :class:`BrowserCrashed` as "this browser is gone, start another".

Example::

    with BrowserPipe.launch() as b:
        session = b.open_page(width=800, height=400)
        b.evaluate(session, "1 + 1", timeout=5.0)  # -> 2
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import select
import shutil
import signal
import tempfile
import time
import weakref
from pathlib import Path
from typing import Self

log = logging.getLogger(__name__)

#: Flags the project runs Chromium with (see docs/architecture.md); the rest only silence
#: first-run work and keep the layout free of scrollbars.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-breakpad",
    "--hide-scrollbars",
    "--mute-audio",
    "--no-first-run",
    "--no-default-browser-check",
    "--remote-debugging-pipe",
)

#: Where the browser is looked for when no executable is given, in order.
CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")

INSTALL_HINT = (
    "math tests render LaTeX with KaTeX in headless Chromium; install it with "
    "`apt-get install chromium` (Debian/Ubuntu) or pass the browser's path as `executable`"
)


class BrowserError(RuntimeError):
    """The browser could not be started or answered with a protocol error."""


class BrowserNotFoundError(BrowserError):
    """No Chromium executable was found; the message says how to install one."""


class BrowserTimeout(BrowserError):
    """The browser did not answer within the deadline (it has been killed)."""


class BrowserCrashed(BrowserError):
    """The browser closed its pipe (it exited or was killed)."""


def find_chromium(executable: str | os.PathLike | None = None) -> str:
    """Return the path of the Chromium to use, or raise :class:`BrowserNotFoundError`.

    ``executable`` wins when given; otherwise ``$OLMPIPE_CHROMIUM``, then the usual names on PATH.
    """
    wanted = executable or os.environ.get("OLMPIPE_CHROMIUM")
    if wanted:
        path = shutil.which(str(wanted))
        if path is None:
            raise BrowserNotFoundError(f"Chromium executable {str(wanted)!r} not found: {INSTALL_HINT}")
        return path
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path is not None:
            return path
    raise BrowserNotFoundError(f"no Chromium found on PATH ({', '.join(CHROMIUM_CANDIDATES)}): {INSTALL_HINT}")


def _reap(pid: int, owner_pid: int, *folders: Path) -> None:
    """Kill the browser's process group, wait for it, remove its profile and temporary folder
    (owner process only: a forked child leaves its parent's browser running)."""
    if owner_pid != os.getpid():
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


_PROFILE_PREFIX = "olmpipe-chromium-"
# The browser's private TMPDIR, kept short (see _browser_tmpdir).
_TMP_PREFIX = "olmcr-"
_FALLBACK_TMP = "/tmp"
# Chromium puts its process-singleton socket at $TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket
# and exits ("Socket path too long") when that path exceeds a Unix socket path's 107 bytes.
_SOCKET_PATH_MAX = 107
_SINGLETON_TAIL = len("/org.chromium.Chromium.XXXXXX/SingletonSocket")


def _remove_stale_profiles() -> None:
    """Delete temporary browser profiles and folders left by processes of this user that were
    killed (a killed process cannot clean up; its browser exits by itself when the pipe closes)."""
    for base in dict.fromkeys((tempfile.gettempdir(), _FALLBACK_TMP)):
        for prefix in (_PROFILE_PREFIX, _TMP_PREFIX):
            for folder in Path(base).glob(prefix + "*-*"):
                pid = folder.name[len(prefix):].split("-", 1)[0]
                try:
                    if not pid.isdigit() or folder.stat().st_uid != os.getuid():
                        continue
                    os.kill(int(pid), 0)  # raises ProcessLookupError when the owner is gone
                except ProcessLookupError:
                    shutil.rmtree(folder, ignore_errors=True)
                except OSError:
                    continue


def _browser_tmpdir() -> Path:
    """A new private ``TMPDIR`` for one browser, removed with its profile.

    Chromium leaves its singleton folder (``org.chromium.Chromium.*``) in ``$TMPDIR`` at every
    start, even after a clean close. The folder is made in the temporary folder when the socket
    path below it fits, else in /tmp (a long ``$TMPDIR``, e.g. pytest's, would stop the browser).
    """
    folder = ""
    for base in dict.fromkeys((tempfile.gettempdir(), _FALLBACK_TMP)):
        try:
            folder = tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-", dir=base)
        except OSError:
            continue
        if len(os.fsencode(folder)) + _SINGLETON_TAIL <= _SOCKET_PATH_MAX:
            return Path(folder)
        os.rmdir(folder)
    raise BrowserError(f"no temporary folder with a path short enough for Chromium's socket "
                       f"(at most {_SOCKET_PATH_MAX - _SINGLETON_TAIL} bytes; TMPDIR is "
                       f"{tempfile.gettempdir()!r}); set TMPDIR to a shorter folder")


def _high_fd(fd: int) -> int:
    """Move ``fd`` to a number >= 10 (close-on-exec), so that dup2 onto 3 and 4 cannot clobber it."""
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return new


class BrowserPipe:
    """One running Chromium and its DevTools pipe. Not thread-safe: callers serialize calls."""

    def __init__(self, pid: int, to_browser: int, from_browser: int, profile_dir: Path,
                 tmp_dir: Path | None = None) -> None:
        self.pid = pid
        self._to = to_browser
        self._from = from_browser
        self._profile_dir = profile_dir
        self._buffer = bytearray()
        self._next_id = 0
        self._closed = False
        self.owner_pid = os.getpid()
        # kills the browser if this object is dropped or the interpreter exits without close()
        self.tmp_dir = tmp_dir
        folders = (profile_dir,) if tmp_dir is None else (profile_dir, tmp_dir)
        self._finalizer = weakref.finalize(self, _reap, pid, self.owner_pid, *folders)

    @classmethod
    def launch(cls, executable: str | os.PathLike | None = None, *, timeout: float = 30.0) -> BrowserPipe:
        """Start Chromium headless with a fresh temporary profile and wait until it answers.

        The browser gets its own ``TMPDIR`` (:func:`_browser_tmpdir`); both folders are removed
        when it is closed or killed, or by a later launch when their owner process is gone.
        """
        path = find_chromium(executable)
        _remove_stale_profiles()
        tmp_dir = _browser_tmpdir()
        try:
            profile_dir = Path(tempfile.mkdtemp(prefix=f"{_PROFILE_PREFIX}{os.getpid()}-"))
        except OSError:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        cmd_r, cmd_w = (_high_fd(fd) for fd in os.pipe())
        out_r, out_w = (_high_fd(fd) for fd in os.pipe())
        log_fd = os.open(profile_dir / "chromium.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        argv = [path, *CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}", "about:blank"]
        try:
            pid = os.posix_spawn(
                path,
                argv,
                {**os.environ, "TMPDIR": str(tmp_dir)},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, null_fd, 0),
                    (os.POSIX_SPAWN_DUP2, log_fd, 1),
                    (os.POSIX_SPAWN_DUP2, log_fd, 2),
                    (os.POSIX_SPAWN_DUP2, cmd_r, 3),
                    (os.POSIX_SPAWN_DUP2, out_w, 4),
                ],
                setsid=True,
            )
        except OSError as exc:
            for fd in (cmd_r, cmd_w, out_r, out_w):
                os.close(fd)
            shutil.rmtree(profile_dir, ignore_errors=True)
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise BrowserError(f"could not start {path}: {exc}") from exc
        finally:
            os.close(log_fd)
            os.close(null_fd)
        os.close(cmd_r)
        os.close(out_w)
        for fd in (cmd_w, out_r):
            os.set_blocking(fd, False)
        browser = cls(pid, cmd_w, out_r, profile_dir, tmp_dir)
        try:
            browser.call("Browser.getVersion", timeout=timeout)
        except BrowserError as exc:
            tail = browser.log_tail()
            browser.close()
            raise BrowserError(f"{path} did not start: {exc}; its log ends with:\n{tail}") from exc
        log.debug("started %s (pid %d)", path, pid)
        return browser

    def log_tail(self, n_chars: int = 2000) -> str:
        """The end of the browser's stderr, for error messages."""
        try:
            return (self._profile_dir / "chromium.log").read_text(errors="replace")[-n_chars:]
        except OSError:
            return "(no log)"

    @property
    def alive(self) -> bool:
        return not self._closed and self.owner_pid == os.getpid()

    def call(self, method: str, params: dict | None = None, *, session: str | None = None,
             timeout: float = 30.0) -> dict:
        """Send one command and return its ``result``; kill the browser if no answer comes in time."""
        if not self.alive:
            raise BrowserCrashed("the browser is closed")
        deadline = time.monotonic() + timeout
        self._next_id += 1
        msg_id = self._next_id
        message = {"id": msg_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        # ensure_ascii: lone surrogates and NUL become \u escapes, so the bytes are valid UTF-8
        # and contain no NUL (the message terminator).
        self._write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\0", deadline, method)
        while True:
            reply = self._read_message(deadline, method)
            if reply.get("id") != msg_id:
                continue  # an event, or the late answer of an abandoned command
            if "error" in reply:
                raise BrowserError(f"{method}: {reply['error'].get('message', reply['error'])}")
            return reply.get("result", {})

    def _write(self, data: bytes, deadline: float, method: str) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise BrowserTimeout(f"{method}: the browser stopped reading commands")
            _, writable, _ = select.select([], [self._to], [], remaining)
            if not writable:
                continue
            try:
                written = os.write(self._to, view)
            except BlockingIOError:
                continue
            except OSError as exc:  # EPIPE: the browser is gone
                self.kill()
                raise BrowserCrashed(f"{method}: {exc}") from exc
            view = view[written:]

    def _read_message(self, deadline: float, method: str) -> dict:
        while True:
            end = self._buffer.find(b"\0")
            if end >= 0:
                raw = bytes(self._buffer[:end])
                del self._buffer[: end + 1]
                try:  # lone surrogates may come back as their (invalid) UTF-8 byte sequences
                    text = raw.decode("utf-8", "surrogatepass")
                except UnicodeDecodeError:
                    text = raw.decode("utf-8", "replace")
                try:
                    return json.loads(text)
                except ValueError as exc:
                    self.kill()
                    raise BrowserCrashed(f"{method}: unreadable message from the browser ({exc})") from exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise BrowserTimeout(f"{method}: no answer from the browser in time")
            readable, _, _ = select.select([self._from], [], [], remaining)
            if not readable:
                continue
            try:
                chunk = os.read(self._from, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                self.kill()
                raise BrowserCrashed(f"{method}: the browser closed its pipe")
            self._buffer += chunk

    def open_page(self, *, width: int, height: int, timeout: float = 30.0) -> str:
        """Open a blank page with a fixed viewport (CSS px, scale 1); return its session id."""
        target = self.call("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                            timeout=timeout)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                  session=session, timeout=timeout)
        return session

    def evaluate(self, session: str, expression: str, *, timeout: float):
        """Evaluate JavaScript in the page and return its value (JSON-serializable results only).

        V8 stops the script after ``timeout`` seconds (a :class:`BrowserTimeout`, the page stays
        usable); the pipe read waits one more second before the browser is declared hung.
        """
        params = {"expression": expression, "returnByValue": True,
                  "timeout": max(1, int(timeout * 1000))}
        try:
            result = self.call("Runtime.evaluate", params, session=session, timeout=timeout + 1.0)
        except BrowserError as exc:
            if "Execution was terminated" in str(exc):
                raise BrowserTimeout(f"script stopped after {timeout:.1f} s") from exc
            raise
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "error")
            raise BrowserError(f"script raised: {text}")
        return result["result"].get("value")

    def kill(self) -> None:
        """Kill the browser's process group at once and release the pipe and profile."""
        if self._closed:
            return
        self._closed = True
        for fd in (self._to, self._from):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._finalizer()

    def close(self, timeout: float = 2.0) -> None:
        """Ask the browser to quit, then make sure its whole process group is gone."""
        if self.alive:
            with contextlib.suppress(BrowserError, OSError, ValueError):
                self.call("Browser.close", timeout=timeout)
        self.kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
