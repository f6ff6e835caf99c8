"""Start and stop the whole platform on one machine: Redis, Ray, the Serve application."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psutil
import redis

from zerolayer.collapse import BuildProgress, build_missing
from zerolayer.config import PlatformConfig
from zerolayer.errors import ArtifactError
from zerolayer.models.importer import ensure_model
from zerolayer.replicas.artifacts import require_artifact
from zerolayer.store.connect import sync_client
from zerolayer.store.embedded import EmbeddedRedis, private_dir, write_private
from zerolayer.store.keys import KeyStore, hash_key

__all__ = ["Platform", "dev_key", "admin_key", "ray_temp_dir"]

EDGE = "zerolayer.gateway.edge:middlewares"


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
    try:  # Ray reads these once, at import: a process that imported it already reads them again
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # a Ray without token authentication
        pass


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


def _without_password(url: str) -> str:
    """A Redis URL fit for a log line: any password replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class _Progress:
    """Prints the deployments' states every few seconds while Serve starts them."""

    def __init__(self, app_name: str, out=sys.stderr):
        self.app_name = app_name
        self.out = out
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from ray import serve

        t0 = time.monotonic()
        while not self._stop.wait(3.0):
            try:
                app = serve.status().applications.get(self.app_name)
            except Exception:
                continue
            if app is None:
                continue
            states = ", ".join(
                f"{name} {d.status.value.lower()}" for name, d in sorted(app.deployments.items())
            )
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
        self.key: str | None = None

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

    def _progress(self, step: BuildProgress) -> None:
        self._say(step.message)

    def start(self) -> Platform:
        """Import missing models, start everything, create the dev key; return self."""
        if self.cfg.ray.address is None:
            # Read by Ray Serve at import in every Ray process, which inherit this environment;
            # set before this module imports ray.
            if self.cfg.ray.throughput_optimized:
                os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
            # the gateway's edge (zerolayer.gateway.edge) around Ray Serve's own HTTP handling
            os.environ.setdefault("RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH", EDGE)
            # Ray's servers listen on every interface and Ray has no setting to change that:
            # every call to them must carry a token, kept in a file only this user can read
            # (Ray's own default is ~/.ray/auth_token, created readable by everyone)
            _ray_token_auth()
        from zerolayer.serve.app import APP_NAME, build_app

        private_dir(Path(self.cfg.cache_dir))  # it holds the keys: this user's alone
        for name in self.cfg.models:
            self._say(f"model {name}: {self.cfg.model_dir(name)}")
            ensure_model(self.cfg, name)
            # tier artifacts: built now if missing (or a clear failure), before anything starts
            if self.cfg.build_missing_artifacts:
                build_missing(self.cfg, name, self._progress)
            for tier in self.cfg.models[name].tiers:
                require_artifact(self.cfg, name, tier)
        if self.cfg.redis.url is None:
            rc = self.cfg.redis
            self._redis = EmbeddedRedis(self.cfg.redis_data_dir(), rc.embedded_port, rc.appendfsync)
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
        # the gateway checks the admin key against its hash; the key stays out of Ray's config
        gateway = self.cfg.gateway.model_copy(
            update={"admin_key_sha256": hash_key(admin_key(self.cfg))}
        )
        self.cfg = self.cfg.model_copy(update={"gateway": gateway})

        import ray
        from ray import serve

        self._say("ray: starting")
        local = self.cfg.ray.address is None
        ray.init(
            address=self.cfg.ray.address,
            num_cpus=self.cfg.ray.num_cpus if local else None,
            include_dashboard=False,
            logging_level="WARNING",
            log_to_driver=True,
            # Ray's session files (logs, sockets) in a folder only this user can enter
            _temp_dir=str(ray_temp_dir()) if local else None,
        )
        self._ray_started = True
        self._ray_processes = self._children()
        if self.on_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.on_sigterm)
        serve.start(http_options={"host": self.cfg.host, "port": self.cfg.port})
        self._say("serve: deploying (the engine loads the model; about a minute on a CPU)")
        try:
            with _Progress(APP_NAME, self.log):  # ends before a failed start stops Ray
                serve.run(
                    build_app(self.cfg),
                    name=APP_NAME,
                    route_prefix="/",
                    # Per-request access lines cost gateway CPU and drown the console; Ray still
                    # writes warnings and errors to its session logs.
                    logging_config={"enable_access_log": False, "log_level": "WARNING"},
                )
        except Exception as exc:
            self.stop()
            raise ArtifactError(f"the application failed to start: {exc}") from exc
        return self

    def stop(self) -> None:
        """Stop the application (its replicas finish or time out their requests in flight and
        settle them), then Ray, then every process Ray left, and the embedded Redis last (it
        fsyncs its AOF on SIGTERM). Each step runs even if one before it failed."""
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
        if self._redis is not None:
            self._redis.stop()
            self._redis = None

    def _drain(self, serve: Any) -> None:
        """Let the gateway finish its requests in flight (bounded by gateway.drain_s) before
        anything stops; new requests get 503 shutting_down meanwhile."""
        from zerolayer.serve.app import APP_NAME

        limit = self.cfg.gateway.drain_s
        try:
            app = serve.status().applications.get(APP_NAME)
            if app is None or app.status.value != "RUNNING":
                return  # a failed or partial start: nothing is being served
            gateway = serve.get_app_handle(APP_NAME)
            left = gateway.drain.remote(limit).result(timeout_s=limit + 10)
            if left:
                self._say(f"drain: {left} requests still in flight after {limit:g} s")
        except Exception as exc:  # nothing to drain (not deployed) or the gateway is gone
            self._say(f"drain skipped: {type(exc).__name__}")

    def _children(self) -> list[psutil.Process]:
        """This process's descendants but the embedded Redis (Ray's processes)."""
        redis_pid = self._redis.pid if self._redis is not None else None
        return [p for p in psutil.Process().children(recursive=True) if p.pid != redis_pid]

    def __enter__(self) -> Platform:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
