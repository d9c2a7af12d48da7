"""A throwaway RabbitMQ node for one bench run, from a chroot tree that ``scripts/services``
builds (4.0: trixie, 4.3: sid), so that a broker of tens of thousands of queues never slows the
shared test brokers.

The node is ``qrbench@localhost`` with ports of its own (amqp 5690, management 15690,
distribution 25690, its own epmd on 4390), RabbitMQ's default statistics settings (none of the
test brokers' conf.d or advanced.config is read), guest allowed from loopback only (the
default), and every file it writes (data, logs, its config) in a temporary directory under the
tree's ``/tmp``. On leaving the ``with`` (normal exit, exception, or SIGINT/SIGTERM turned into
SystemExit by ``exit_on_signals``) the node is shut down, killed if it lingers, its epmd
stopped, and the temporary directory removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from _scratch_vhost import signals_held

CACHE = Path("/var/cache/queue-reaper")
TREES = {"4.0": CACHE / "trixie", "4.3": CACHE / "sid"}
NODE = "qrbench@localhost"
AMQP, MANAGEMENT, DIST, EPMD = 5690, 15690, 25690, 4390
START_SECONDS = 180.0
STOP_SECONDS = 60.0
#: The tree's own broker user (uid and gid read from the tree's /etc/passwd).
USER = "rabbitmq"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _ids(tree: Path) -> tuple[int, int]:
    for line in (tree / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == USER:
            return int(fields[2]), int(fields[3])
    raise SystemExit(f"no user {USER} in {tree}/etc/passwd: run scripts/services first")


def _env(inside: str) -> dict[str, str]:
    """The environment of every process run in the tree: nothing of the host's."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/var/lib/rabbitmq",  # the tree's Erlang cookie
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "RABBITMQ_CONF_ENV_FILE": f"{inside}/rabbitmq-env.conf",
        "ERL_EPMD_PORT": str(EPMD),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
    }


def _write_files(work: Path, inside: str) -> None:
    (work / "conf.d").mkdir()
    (work / "rabbitmq.conf").write_text(
        f"listeners.tcp.local = 127.0.0.1:{AMQP}\n"
        "management.tcp.ip = 127.0.0.1\n"
        f"management.tcp.port = {MANAGEMENT}\n"
    )
    (work / "enabled_plugins").write_text("[rabbitmq_management].\n")
    (work / "rabbitmq-env.conf").write_text(
        f"NODENAME={NODE}\n"
        f"DIST_PORT={DIST}\n"
        f"CONFIG_FILE={inside}/rabbitmq.conf\n"
        f"CONFIG_FILES={inside}/conf.d\n"
        f"ADVANCED_CONFIG_FILE={inside}/advanced.config\n"
        f"ENABLED_PLUGINS_FILE={inside}/enabled_plugins\n"
        f"MNESIA_BASE={inside}/mnesia\n"
        f"LOG_BASE={inside}/log\n"
        f'SERVER_ADDITIONAL_ERL_ARGS="+sbwt none +sbwtdcpu none +sbwtdio none -qr_node {NODE}"\n'
        f"export ERL_EPMD_PORT={EPMD}\n"
        "export ERL_EPMD_ADDRESS=127.0.0.1\n"
        'export ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}"\n'
    )


def _in_tree(tree: Path, uid: int, gid: int, *command: str) -> list[str]:
    return ["chroot", f"--userspec={uid}:{gid}", str(tree), *command]


def _wait_api(url: str, node: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if node.poll() is not None:
            raise SystemExit(f"the bench's node exited {node.returncode} at boot: see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/api/overview", auth=("guest", "guest"), timeout=5).is_success:
                return
        time.sleep(1)
    raise SystemExit(f"the bench's node did not answer at {url} within {START_SECONDS:.0f} s")


def _stop(tree: Path, ids: tuple[int, int], inside: str, node: subprocess.Popen[bytes]) -> None:
    env = _env(inside)
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        subprocess.run(
            _in_tree(tree, *ids, "/usr/lib/rabbitmq/bin/rabbitmqctl", "-q", "shutdown"),
            env=env,
            timeout=STOP_SECONDS,
            capture_output=True,
            check=False,
            cwd="/",
        )
    try:
        node.wait(timeout=10)
    except subprocess.TimeoutExpired:
        print(f"  the bench's node (pid {node.pid}) outlived its shutdown: killing it")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)  # its own session: the script and the VM
        node.wait(timeout=10)
    # epmd refuses -kill while it still lists the node (a node killed a moment ago may still
    # be listed): ask again until its port is free, for as long as a stop may take.
    for _ in range(int(STOP_SECONDS)):
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            subprocess.run(
                _in_tree(tree, *ids, "/usr/bin/epmd", "-kill"),
                env=env,
                timeout=STOP_SECONDS,
                capture_output=True,
                check=False,
                cwd="/",
            )
        if not _listening(EPMD):
            return
        time.sleep(1)
    print(f"  the bench's epmd still listens on {EPMD}: `ERL_EPMD_PORT={EPMD} epmd -kill`")


@contextlib.contextmanager
def own_broker(version: str) -> Iterator[str]:
    """A node of RabbitMQ ``version`` ('4.0' or '4.3') for the duration; yields its
    management URL."""
    tree = TREES[version]
    if not (tree / "usr/lib/rabbitmq/bin/rabbitmq-server").exists():
        raise SystemExit(f"no RabbitMQ {version} tree at {tree}: run scripts/services first")
    busy = [p for p in (AMQP, MANAGEMENT, DIST, EPMD) if _listening(p)]
    if busy:
        raise SystemExit(
            f"ports {busy} are in use (another bench's node? `ps aux | grep {NODE}`): "
            "stop it or wait for it to finish"
        )
    ids = _ids(tree)
    work = Path(tempfile.mkdtemp(prefix="qrbench-", dir=tree / "tmp"))
    inside = "/" + str(work.relative_to(tree))
    node: subprocess.Popen[bytes] | None = None
    try:
        _write_files(work, inside)
        for path in [work, *work.rglob("*")]:
            shutil.chown(path, *ids)
        log = work / "start.log"
        with log.open("wb") as out:
            node = subprocess.Popen(
                _in_tree(tree, *ids, "/usr/lib/rabbitmq/bin/rabbitmq-server"),
                env=_env(inside),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                cwd="/",
            )
        url = f"http://127.0.0.1:{MANAGEMENT}"
        _wait_api(url, node, log)
        yield url
    finally:
        with signals_held():
            if node is not None:
                _stop(tree, ids, inside, node)
            shutil.rmtree(work, ignore_errors=True)
