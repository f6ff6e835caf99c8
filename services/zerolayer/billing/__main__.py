"""`python -m zerolayer.billing`: one billing consumer in this process, on the platform's Redis
(REDIS_URL, else the embedded one's config), until SIGTERM or Ctrl-C. The billing deployment runs
the same consumer inside Ray Serve; this is for running (or testing) one outside it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from zerolayer.billing.consumer import Biller
from zerolayer.config import load_config
from zerolayer.store.connect import async_client


async def _main(name: str | None, batch: int | None) -> None:
    cfg = load_config()
    if batch is not None:
        cfg.billing.batch = batch
    client = async_client(cfg.redis, socket_timeout=10, socket_connect_timeout=2)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    biller = Biller(client, cfg.billing, name=name)
    logging.getLogger(__name__).info("billing consumer %s started", biller.name)
    await biller.run(stop)
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m zerolayer.billing", description=__doc__)
    parser.add_argument("--name", default=None, help="consumer name (default: host-pid)")
    parser.add_argument("--batch", type=int, default=None, help="events per batch (billing.batch)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parser.parse_args()
    asyncio.run(_main(args.name, args.batch))
