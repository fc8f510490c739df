"""agent-sandbox-controller with short leader-election timings, for the fault tests.

The real command line (``agentsandbox.cli.controller.main``, every flag as given) with the
Manager's lease timings taken from ``AGENTSANDBOX_LEASE`` = "duration,renew,retry" seconds
(default 4,3,0.5). The controller has upstream's flags only, and upstream has none for these
(controller-runtime's 15/10/2 s), so a 17 s takeover bound would make the test slow.

With ``AGENTSANDBOX_STALL`` = seconds, SIGUSR1 blocks the event loop (the main thread) for that
long, as a long synchronous step would.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from agentsandbox.cli import controller
from agentsandbox.kube import manager


def main() -> int:
    duration, renew, retry = (
        float(x) for x in os.environ.get("AGENTSANDBOX_LEASE", "4,3,0.5").split(",")
    )
    init = manager.Manager.__init__

    def short(self: manager.Manager, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("lease_duration", duration)
        kwargs.setdefault("renew_deadline", renew)
        kwargs.setdefault("retry_period", retry)
        init(self, *args, **kwargs)

    manager.Manager.__init__ = short  # type: ignore[method-assign]
    stall = float(os.environ.get("AGENTSANDBOX_STALL", "0"))
    if stall > 0:

        def block(signum: int, frame: object) -> None:
            # A Python signal handler runs in the main thread, between two steps of the loop:
            # busy for ``stall`` seconds, nothing else runs (a CPU-bound pass, a huge scrape).
            end = time.monotonic() + stall
            while time.monotonic() < end:
                pass

        signal.signal(signal.SIGUSR1, block)
    return controller.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
