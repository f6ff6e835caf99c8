"""Start and stop the whole platform on one machine: Redis, Ray, the Serve application."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
import redis

from zerolayer.artifacts import card_stamp
from zerolayer.collapse import missing_kinds, tiers_of_kind
from zerolayer.config import PlatformConfig, RayConfig
from zerolayer.config.pricing import Prices
from zerolayer.errors import ArtifactError
from zerolayer.models.importer import ensure_model
from zerolayer.ray_private import (
    HAPROXY_HOOK,
    haproxy_settings,
    reload_auth_token,
    temp_dir_option,
)
from zerolayer.replicas.artifacts import require_artifact
from zerolayer.serve.builds import Builds
from zerolayer.store.connect import sync_client
from zerolayer.store.embedded import EmbeddedRedis, private_dir, write_private
from zerolayer.store.keys import KeyStore, hash_key
from zerolayer.store.tiers import TierBoard, TierState

__all__ = ["Platform", "dev_key", "admin_key", "ray_temp_dir"]

EDGE = "zerolayer.gateway.edge:middlewares"
# Per-request access lines cost CPU and drown the console; Ray still writes warnings and errors
# to its session logs.
SERVE_LOGGING = {"enable_access_log": False, "log_level": "WARNING"}


def dev_key_path(cfg: PlatformConfig) -> Path:
    """Where the developer key is kept: dev_key_file, else <cache>/dev-key."""
    return Path(cfg.dev_key_file or Path(cfg.cache_dir) / "dev-key")


def dev_key(cfg: PlatformConfig, client: redis.Redis) -> str:
    """The local developer key: kept in <cache>/dev-key (mode 600), created on first use or
    when Redis no longer knows it."""
    path = dev_key_path(cfg)
    store = KeyStore(client)
    if path.exists():
        key = path.read_text().strip()
        record = store.lookup(key)
        if record is not None and not record.revoked and record.plan in cfg.plans:
            return key
    key, _ = store.create(cfg.dev_plan, name="dev-key")
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, key + "\n")
    return key


def admin_key(cfg: PlatformConfig) -> str:
    """The admin key: ZEROLAYER_ADMIN_KEY when set, else the one kept in <cache>/admin-key
    (mode 600), made on first use."""
    if cfg.admin_key:
        return cfg.admin_key
    path = Path(cfg.admin_key_file or Path(cfg.cache_dir) / "admin-key")
    if path.exists():
        return path.read_text().strip()
    key = "zla-" + secrets.token_urlsafe(32)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(path, key + "\n")
    return key


def _private_tmp() -> Path:
    """<tmp>/zerolayer-<uid>: this user's alone (0700)."""
    return private_dir(Path(tempfile.gettempdir()) / f"zerolayer-{os.getuid()}")


def ray_temp_dir() -> Path:
    """Where a local Ray keeps its session files (logs, sockets). Ray makes the folders it
    creates world-writable (0777), so this one sits inside a private folder (0700) that nobody
    else can enter; short, for Ray's socket paths."""
    return _private_tmp() / "ray"


def ray_auth_token() -> Path:
    """The token every call to the local Ray's servers must carry (made once, mode 0600)."""
    path = _private_tmp() / "ray-auth-token"
    if not path.exists():
        write_private(path, secrets.token_hex(32))
    return path


def _ray_token_auth() -> None:
    """Token authentication for the local Ray (see Platform.start)."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN_PATH", str(ray_auth_token()))
    # Ray reads these once, at import: a process that imported it already reads them again
    reload_auth_token()


def _haproxy_env(ray_cfg: RayConfig) -> None:
    """Ray Serve's HAProxy (see Platform.start) with its files in a folder only this user can
    enter (Ray's default, /tmp/haproxy-serve, holds an admin socket anyone may write to) and
    its statistics and metrics listeners on free ports (Ray's defaults, 8404 and 9101, would
    clash between two platforms on one machine), on 127.0.0.1 only, with a header timeout and
    a limit of connections per client address: Ray has no setting for those three, so the
    worker setup hook zerolayer.ray_private.harden_haproxy rewrites its template from the
    settings put here. Set here, not defaulted: a platform started from a process that
    started one inherits its settings."""
    folder = _haproxy_dir()
    settings = {
        "RAY_SERVE_ENABLE_HA_PROXY": "1",
        "RAY_SERVE_HAPROXY_CONFIG_FILE_LOC": str(folder / "haproxy.cfg"),
        "RAY_SERVE_HAPROXY_SOCKET_PATH": str(folder / "sock"),
        "RAY_SERVE_HAPROXY_SERVER_STATE_BASE": str(folder),
        "RAY_SERVE_HAPROXY_SERVER_STATE_FILE": str(folder / "server-state"),
        "RAY_SERVE_HAPROXY_STATS_PORT": str(_free_port()),
        "RAY_SERVE_HAPROXY_METRICS_PORT": str(_free_port()),
        **haproxy_settings(
            ray_cfg.haproxy_header_timeout_s, ray_cfg.haproxy_connections_per_source
        ),
    }
    os.environ.update(settings)


# HAProxy refuses an admin socket path longer than this; Ray puts the socket one folder (a
# 56-character session hash) below the configured folder.
_HAPROXY_SOCKET_MAX = 97


def _haproxy_dir() -> Path:
    """A private folder for this platform's HAProxy files, short enough for its socket path
    (<folder>/<session hash>/sock); under /tmp when the temporary folder's path is too long."""
    name = f"ha{os.getpid()}"
    folder = _private_tmp() / name
    if len(str(folder)) + 1 + 56 + len("/sock") > _HAPROXY_SOCKET_MAX:
        folder = private_dir(Path("/tmp") / f"zl-{os.getuid()}") / name
    return private_dir(folder)


def _submit(app: Any, name: str, route_prefix: str | None) -> None:
    """Ask Serve to deploy an application without waiting for it to run (serve.run waits), so
    that every tier's replicas load their models at the same time."""
    from ray import serve

    serve.run_many(
        [serve.RunTarget(app, name=name, route_prefix=route_prefix, logging_config=SERVE_LOGGING)],
        wait_for_applications_running=False,
    )


def _free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _end_processes(procs: list[psutil.Process], grace_s: float = 10.0) -> None:
    """SIGTERM the processes still alive, then SIGKILL those that outlive grace_s."""
    alive = [p for p in procs if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, left = psutil.wait_procs(alive, timeout=grace_s)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=5)


_FAILED = ("DEPLOY_FAILED", "UNHEALTHY")


def _without_password(url: str) -> str:
    """A Redis URL fit for a log line: any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# Ray Serve builds its config objects (serve.deployment, and serve.status() parsing the
# controller's answer) by registering a module with cloudpickle, pickling, and unregistering it
# again: two threads doing that at once fail with "... is not registered for pickle by value".
# Every call of the launcher's threads into Serve's client API holds this lock.
_SERVE_API = threading.RLock()


def _serve_apps() -> dict[str, Any]:
    """Serve's applications by name, as serve.status() gives them (under _SERVE_API)."""
    from ray import serve

    with _SERVE_API:
        return serve.status().applications


def _await_apps(names: list[str], timeout_s: float, stop: Any = None) -> str | None:
    """Wait until every named application runs: None; Serve's message (its last 500
    characters) as soon as one failed; "" past timeout_s or once stop() is true."""
    deadline = time.monotonic() + timeout_s
    while True:
        apps = _serve_apps()
        states = [apps.get(n) for n in names]
        failed = [a for a in states if a is not None and a.status.value in _FAILED]
        if failed:
            return failed[0].message[-500:] or failed[0].status.value
        if all(a is not None and a.status.value == "RUNNING" for a in states):
            return None
        if time.monotonic() > deadline or (stop is not None and stop()):
            return ""
        time.sleep(0.5)


class _Progress:
    """Prints the deployments' states every few seconds while Serve starts them."""

    def __init__(self, app_names: list[str], out=sys.stderr):
        self.app_names = app_names
        self.out = out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(3.0):
            try:
                apps = _serve_apps()
            except Exception:
                continue
            states = ", ".join(
                f"{name} {d.status.value.lower()}"
                for app in (apps.get(a) for a in self.app_names)
                if app is not None
                for name, d in sorted(app.deployments.items())
            )
            if not states:
                continue
            print(f"  [{time.monotonic() - t0:5.0f}s] {states}", file=self.out, flush=True)

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class Platform:
    """Redis + Ray + the zerolayer application, started in order and stopped in reverse."""

    def __init__(self, cfg: PlatformConfig, log=sys.stderr, on_sigterm: Any = None):
        self.cfg = cfg
        self.log = log
        # Ray's init replaces the process's SIGTERM handler with one that kills every Ray
        # process at once; the caller's (which stops in order, draining) is put back after it
        self.on_sigterm = on_sigterm
        self._redis: EmbeddedRedis | None = None
        self._ray_started = False
        self._ray_processes: list[psutil.Process] = []
        # this process's children from before Ray started (a Redis server the caller runs, say):
        # not Ray's, never ended by stop()
        self._not_ray: set[int] = set()
        self._builds: Builds | None = None
        self._board: TierBoard | None = None
        self._t0 = time.monotonic()
        self.key: str | None = None
        self._stamps: dict[tuple[str, str], str | None] = {}  # (model, tier) -> artifact
        self._watching = threading.Event()
        self._watcher: threading.Thread | None = None

    @property
    def admin_key_source(self) -> str:
        """Where the admin key comes from (said at start; the key itself is not printed)."""
        if self.cfg.admin_key:
            return "ZEROLAYER_ADMIN_KEY"
        return str(self.cfg.admin_key_file or Path(self.cfg.cache_dir) / "admin-key")

    @property
    def dev_key_path(self) -> Path:
        """Where the developer key is kept."""
        return dev_key_path(self.cfg)

    @property
    def base_url(self) -> str:
        return f"http://{self.cfg.host}:{self.cfg.port}/v1"

    def _say(self, msg: str) -> None:
        print(msg, file=self.log, flush=True)

    def start(self) -> Platform:
        """Import missing models, start Redis, Ray and the application with every tier whose
        artifact is there, create the dev key, and build the missing artifacts in the
        background (each tier joins when its artifact is ready); return self."""
        self._t0 = time.monotonic()
        if self.cfg.ray.address is None:
            # Read by Ray Serve at import in every Ray process, which inherit this environment;
            # set before this module imports ray.
            if self.cfg.ray.throughput_optimized:
                os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
            if self.cfg.ray.throughput_optimized and self.cfg.ray.haproxy:
                _haproxy_env(self.cfg.ray)
            else:  # not inherited from a process that started a platform with it
                os.environ["RAY_SERVE_ENABLE_HA_PROXY"] = "0"
            # the gateway's edge (zerolayer.gateway.edge) around Ray Serve's own HTTP handling
            os.environ.setdefault("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", EDGE)
            # In throughput mode every application's ingress replica (the gateway, and each
            # tier's) stays up at least this long when it stops, so that load balancers can
            # take it out of rotation (Ray's default: 30 s). Nothing balances in front of a
            # local platform, and the launcher drains the gateway itself before Serve stops.
            os.environ.setdefault("RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "1")
            # Ray's servers listen on every interface and Ray has no setting to change that:
            # every call to them must carry a token, kept in a file only this user can read
            # (Ray's own default is ~/.ray/auth_token, created readable by everyone)
            _ray_token_auth()
        from zerolayer.serve.app import APP_NAME, build_app

        private_dir(Path(self.cfg.cache_dir))  # it holds the keys: this user's alone
        # a hand price under its tier's measured cost, before anything starts (config.pricing)
        Prices(self.cfg).refuse_below_cost()
        todo: dict[str, list[str]] = {}  # model -> artifact kinds to build in the background
        ready: list[tuple[str, str]] = []  # (model, tier) deployed now
        for name in self.cfg.models:
            self._say(f"model {name}: {self.cfg.model_dir(name)}")
            ensure_model(self.cfg, name)
            if self.cfg.build_missing_artifacts and (kinds := missing_kinds(self.cfg, name)):
                todo[name] = kinds
            building = {t for k in todo.get(name, []) for t in tiers_of_kind(self.cfg, name, k)}
            for tier in self.cfg.models[name].tiers:
                if tier not in building:
                    require_artifact(self.cfg, name, tier)  # a clear failure, before anything
                    ready.append((name, tier))
        if self.cfg.redis.url is None:
            rc = self.cfg.redis
            self._redis = EmbeddedRedis(
                self.cfg.redis_data_dir(), rc.embedded_port, rc.appendfsync, rc.maxmemory
            )
            url = self._redis.start()
            self._say(
                f"redis: embedded server at {url} (password in {self._redis.secret_file}; "
                f"AOF in {self._redis.data_dir}, appendfsync {rc.appendfsync})"
            )
            self.cfg = self.cfg.model_copy(update={"redis": self._redis.config()})
        else:
            self._say(f"redis: {_without_password(self.cfg.redis.url or '')}")
        client = sync_client(self.cfg.redis)
        try:
            self.key = dev_key(self.cfg, client)
        finally:
            client.close()
        # the tier board: every served tier starting or queued for its build, nothing else
        self._board = TierBoard(sync_client(self.cfg.redis))
        self._board.reset([f"{m}:{t}" for m, mc in self.cfg.models.items() for t in mc.tiers])
        for m, t in ready:
            self._board.set(f"{m}:{t}", TierState("starting"))
        self._builds = Builds(self.cfg, self._board, self._deploy_tier, self._say)
        self._builds.queue(todo)
        # the gateway checks the admin key against its hash; the key stays out of Ray's config
        gateway = self.cfg.gateway.model_copy(
            update={"admin_key_sha256": hash_key(admin_key(self.cfg))}
        )
        self.cfg = self.cfg.model_copy(update={"gateway": gateway})

        import ray
        from ray import serve

        self._say("ray: starting")
        local = self.cfg.ray.address is None
        self._not_ray = {p.pid for p in psutil.Process().children(recursive=True)}
        ray.init(
            address=self.cfg.ray.address,
            num_cpus=self.cfg.ray.num_cpus if local else None,
            include_dashboard=False,
            logging_level=logging.WARNING,
            log_to_driver=True,
            # Ray's session files (logs, sockets) in a folder only this user can enter
            **(temp_dir_option(ray_temp_dir()) if local else {}),
            # HAProxy's template hardened in the process that writes its configuration
            runtime_env=(
                {"worker_process_setup_hook": HAPROXY_HOOK}
                if self.cfg.ray.throughput_optimized and self.cfg.ray.haproxy
                else None
            ),
        )
        self._ray_started = True
        self._ray_processes = self._children()
        if self.on_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.on_sigterm)
        serve.start(http_options={"host": self.cfg.host, "port": self.cfg.port})
        self._say("serve: deploying (each engine loads the model; about a minute on a CPU)")
        try:
            tier_apps = [n for m, t in ready for n in self._submit_tier(m, t)]
            with _Progress([APP_NAME, *tier_apps], self.log):  # ends before a failed start
                with _SERVE_API:
                    _submit(build_app(self.cfg), APP_NAME, "/")
                failed = _await_apps([APP_NAME], timeout_s=1800.0)
                if failed is not None:
                    raise ArtifactError(f"the gateway failed to start: {failed}")
                for m, t in ready:
                    self._await_tier(m, t)
        except Exception as exc:
            self.stop()
            raise ArtifactError(f"the application failed to start: {exc}") from exc
        if todo:
            self._builds.start(todo)
        self._watcher = threading.Thread(
            target=self._watch_artifacts, name="artifact-watch", daemon=True
        )
        self._watcher.start()
        return self

    @property
    def elapsed_s(self) -> float:
        """Seconds since start() was called."""
        return time.monotonic() - self._t0

    def _submit_tier(self, model: str, tier: str) -> list[str]:
        """Ask Serve to deploy the tier's applications (not waiting); their names."""
        from zerolayer.serve.app import tier_apps

        names = []
        with _SERVE_API:
            self._stamps[(model, tier)] = card_stamp(self.cfg.artifact_dir(model, tier))
            for name, app in tier_apps(self.cfg, model, tier).items():
                _submit(app, name, None)
                names.append(name)
        return names

    def _watch_artifacts(self) -> None:
        """Every artifact_watch_s: a deployed tier whose folder holds another artifact (promoted
        or rolled back) is deployed again with the new artifact's stamp; Serve passes it to the
        running replicas, which swap the artifact in place without dropping a request."""
        while not self._watching.wait(self.cfg.artifact_watch_s):
            for (model, tier), stamp in list(self._stamps.items()):
                now = card_stamp(self.cfg.artifact_dir(model, tier))
                if now is None or now == stamp:
                    continue  # unchanged, or mid-swap (no card for a moment)
                self._say(f"tier {model}:{tier}: another artifact ({now}), replicas swap to it")
                try:
                    self._submit_tier(model, tier)
                except Exception as exc:  # Ray stopping under it: the next turn tries again
                    self._say(f"tier {model}:{tier}: swap not submitted: {exc!r}")

    def _await_tier(self, model: str, tier: str, timeout_s: float = 1800.0) -> None:
        """Wait until the tier's applications run, then mark it ready on the board (or failed,
        with Serve's message)."""
        from zerolayer.serve.app import tier_app_names

        names = tier_app_names(self.cfg, model, tier)
        stopping = lambda: bool(self._builds and self._builds.stopping)  # noqa: E731
        failed = _await_apps(names, timeout_s, stop=stopping)
        if failed == "":
            return  # out of time, or the platform stopping
        if failed is not None:
            reason = f"its replica failed to start: {failed}"
            self._say(f"tier {model}:{tier} failed: {reason}")
            assert self._board is not None
            self._board.set(f"{model}:{tier}", TierState("failed", reason=reason))
            return
        assert self._board is not None
        self._board.set(f"{model}:{tier}", TierState("ready"))
        self._say(f"tier {model}:{tier} ready, {self.elapsed_s:.0f} s after start")

    def _deploy_tier(self, model: str, tier: str) -> None:
        """A tier whose artifact was just built: deploy it into the running platform."""
        assert self._board is not None
        try:
            self._board.set(f"{model}:{tier}", TierState("starting"))
            self._submit_tier(model, tier)
            self._await_tier(model, tier)
        except Exception as exc:  # Ray stopping under it, or Serve refusing the application
            self._board.set(
                f"{model}:{tier}", TierState("failed", reason=f"deploy failed: {exc!r}"[:500])
            )

    def stop(self) -> None:
        """Stop the application (its replicas finish or time out their requests in flight and
        settle them), then Ray, then every process Ray left, and the embedded Redis last (it
        fsyncs its AOF on SIGTERM). Each step runs even if one before it failed."""
        self._watching.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
            self._watcher = None
        if self._ray_started:
            import ray
            from ray import serve

            seen = {p.pid: p for p in self._ray_processes + self._children()}
            self._drain(serve)
            try:
                serve.shutdown()
            except Exception as exc:  # keep going: what follows must still stop
                self._say(f"serve shutdown failed: {exc!r}")
            try:
                ray.shutdown()
            except Exception as exc:
                self._say(f"ray shutdown failed: {exc!r}")
            self._ray_started = False
            _end_processes(list(seen.values()))
            self._ray_processes = []
        if self._board is not None:
            self._board.client.close()
            self._board = None
        if self._redis is not None:
            self._redis.stop()
            self._redis = None

    def _drain(self, serve: Any) -> None:
        """Let the gateway finish its requests in flight (bounded by gateway.drain_s) before
        anything stops; new requests get 503 shutting_down meanwhile."""
        from zerolayer.serve.app import APP_NAME

        limit = self.cfg.gateway.drain_s

        async def drain() -> int:
            # awaited in an event loop of its own: with Serve's throughput-optimised mode a
            # handle's router runs in the caller's loop, and a handle used outside any loop
            # raises RuntimeError ("No event loop running")
            gateway = serve.get_app_handle(APP_NAME)
            return int(await asyncio.wait_for(gateway.drain.remote(limit), limit + 10))

        try:
            app = _serve_apps().get(APP_NAME)
            if app is None or app.status.value != "RUNNING":
                return  # a failed or partial start: nothing is being served
            with _SERVE_API:
                left = asyncio.run(drain())
            if left:
                self._say(f"drain: {left} requests still in flight after {limit:g} s")
        except Exception as exc:  # nothing to drain (not deployed) or the gateway is gone
            self._say(f"drain skipped: {type(exc).__name__}: {exc}")

    def _children(self) -> list[psutil.Process]:
        """This process's descendants started since Ray was: Ray's processes (the embedded
        Redis starts before Ray)."""
        return [p for p in psutil.Process().children(recursive=True) if p.pid not in self._not_ray]

    def __enter__(self) -> Platform:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
