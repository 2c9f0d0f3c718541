"""The Hugging Face hub, where timm's and transformers' pretrained weights come from: offline mode when it does not
answer, so that weights missing from the local cache fail at once instead of after a minute of retries."""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlparse

#: How long the hub's endpoint has to accept a connection before this process works offline.
PROBE_SECONDS = 3.0


def settle_offline_mode(timeout: float = PROBE_SECONDS) -> bool:
    """Whether huggingface_hub works offline in this process: as the environment says (``HF_HUB_OFFLINE``), or,
    when the hub's endpoint accepts no connection within ``timeout`` seconds, from now on. Offline, weights in the
    local cache still load; missing ones fail on the first request rather than after its retries."""
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE and not _answers(constants.ENDPOINT, timeout):
        constants.HF_HUB_OFFLINE = True  # read at every request (huggingface_hub.is_offline_mode)
    return constants.HF_HUB_OFFLINE


def _answers(endpoint: str, timeout: float) -> bool:
    """Whether ``endpoint``'s host accepts a TCP connection within ``timeout`` seconds, name lookup included (in a
    thread: the socket's own timeout does not bound the lookup)."""
    url = urlparse(endpoint)
    address = (url.hostname or "", url.port or (80 if url.scheme == "http" else 443))
    answered: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection(address, timeout=timeout).close()
            answered.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=connect, daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answered)
