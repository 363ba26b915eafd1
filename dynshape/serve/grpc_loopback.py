"""A replica's inter-deployment gRPC server on the loopback address when Ray runs locally
(imports Ray): every replica of the application calls ``loopback_grpc()`` in its constructor,
the model's (``deployment.py``) and the front's (``front.py``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import ray


def loopback_grpc() -> None:
    """On a node whose address is the loopback one (a local Ray, ``local.py``), make this
    replica's inter-deployment gRPC server listen there too.

    Ray Serve 2.60 starts that server on ``[::]:0`` (every interface) in
    ``ray.serve._private.replica``, with no setting to change it (token authentication is on
    by default); everything else a local Ray opens listens on 127.0.0.1. The address is
    rewritten where the replica module binds it; nothing else of Ray changes. A Ray without
    that function is left alone (``tests/serve/test_serve_sockets.py`` would then fail and say
    which socket listens where)."""
    # Ray's private module, typed as what it is to us: a namespace with one function to wrap.
    replica: Any = importlib.import_module("ray.serve._private.replica")
    bind = getattr(replica, "add_port_to_grpc_server", None)
    if bind is None or getattr(bind, "loopback", False):
        return
    node_address: Callable[[], str] = ray.util.get_node_ip_address  # declared untyped by Ray
    if node_address() != "127.0.0.1":
        return  # a real cluster: other nodes' proxies must reach this replica

    def on_loopback(server: Any, address: str) -> Any:
        return bind(server, address.replace("[::]", "127.0.0.1", 1))

    on_loopback.loopback = True  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = on_loopback
