"""The commands that run something until stopped: `local` (a tritonserver kept in sync with CR files),
`run` (the operator), `stats` (a running Triton's batching) and `memory-sidecar`.

Each imports what it runs inside its function, so the other commands start without it.
"""

from __future__ import annotations

import argparse
import sys


def cmd_local(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    from ..local.local_access import LocalModeError
    from ..local.runner import run_local
    from ..local.tritonserver import Ports, TritonFailed, TritonNotInstalled

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.paths and args.model_repository is None:
        print(
            "triton-operator local: name CR files or folders, or a model repository with --model-repository DIR",
            file=sys.stderr,
        )
        return 2
    try:
        return asyncio.run(
            run_local(
                args.paths,
                ports=Ports(args.http_port, args.grpc_port, args.metrics_port),
                control_key=args.control_key,
                open_control_api=args.open_control_api,
                shm_key=args.shm_key,
                server_name=args.server,
                once=args.once,
                workdir=args.workdir,
                model_repository=args.model_repository,
            )
        )
    except (LocalModeError, TritonNotInstalled, TritonFailed) as error:
        print(f"triton-operator local: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def cmd_run(args: argparse.Namespace) -> int:
    from ..k8s.process.run import run

    return run(clusterwide=args.all_namespaces, namespaces=args.namespace)


def cmd_stats(args: argparse.Namespace) -> int:
    import asyncio

    from ..triton.client import ControlError
    from .stats_command import run_stats, unread

    try:
        return asyncio.run(
            run_stats(args.url, args.model, watch=args.watch, interval_seconds=args.interval, key=args.key)
        )
    except ControlError as error:
        print(f"triton-operator stats: {unread(args.url, error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def cmd_memory_sidecar(args: argparse.Namespace) -> int:
    from ..memory.sidecar import serve

    serve(args.host, args.port)
    return 0
