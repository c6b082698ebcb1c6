"""Real servers for tests, on loopback: a throwaway PostgreSQL cluster and an MLflow tracking
server that uses it as its backend store (artifacts served by the tracking server itself).

PostgreSQL comes from the Debian package (.ci/run installs it when missing); initdb refuses to
run as root, so as root the cluster belongs to the ``postgres`` user and its commands run
through ``runuser``."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def postgres_bin() -> Path | None:
    """The folder of initdb / pg_ctl (Debian keeps them out of PATH), or None when not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(versions[-1]).parent if versions else None


@contextlib.contextmanager
def background(args: list[str], cwd: Path | None, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A process in its own session, output to ``log``; its whole group is stopped with SIGTERM
    (then SIGKILL) on exit."""
    with open(log, "w") as out:
        proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield proc
        finally:
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(wait)
                    break


def wait_until(check: Callable[[], bool], what: str, log: Path, seconds: float = 180) -> None:
    """Poll ``check`` every second; fail with the tail of ``log`` after ``seconds``."""
    deadline = time.time() + seconds
    while not check():
        assert time.time() < deadline, f"{what} not ready after {seconds:.0f} s; log:\n{log.read_text()[-3000:]}"
        time.sleep(1)


def healthy(url: str) -> bool:
    """GET ``url`` answers 200."""
    with contextlib.suppress(OSError):
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    return False


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    """A fresh cluster on 127.0.0.1 with database ``mlflow`` (trust auth, loopback only); yields its URI."""
    binaries = postgres_bin()
    if binaries is None:
        raise RuntimeError("PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)")
    root = Path(tempfile.mkdtemp(prefix="minibert-pg-"))
    root.chmod(0o755)
    data, sockets = root / "data", root / "sockets"
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        sockets.mkdir()
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
    else:
        sockets.mkdir()
    port = free_port()

    def run(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, text=True)

    run(str(binaries / "initdb"), "-D", str(data), "-U", "mlflow", "--auth=trust", "-E", "UTF8")
    run(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(root / "log"), "-w", "-t", "60", "start",
        "-o", f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1")
    try:
        run(str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "mlflow", "mlflow")
        yield f"postgresql+psycopg2://mlflow@127.0.0.1:{port}/mlflow"
    finally:
        subprocess.run([*as_user, str(binaries / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(backend_uri: str, folder: Path) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 (one worker) over ``backend_uri``, serving artifacts from
    ``folder``; yields its tracking URI."""
    port = free_port()
    log = folder / "mlflow-server.log"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(MLFLOW_DISABLE_TELEMETRY="true", PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    with background([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", backend_uri,
                     "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1",
                     "--port", str(port), "--workers", "1"], None, env, log) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: healthy(f"{url}/health") or proc.poll() is not None, "mlflow server", log, 120)
        assert proc.poll() is None, f"mlflow server exited ({proc.returncode}):\n{log.read_text()[-3000:]}"
        yield url
