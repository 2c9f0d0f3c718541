"""The hub's offline mode: a process whose hub does not answer works offline, so missing weights fail at once."""

from __future__ import annotations

import socket

import pytest
from huggingface_hub import constants

from vitprune.models.hub import settle_offline_mode


@pytest.fixture
def online(monkeypatch):
    """huggingface_hub as a process without HF_HUB_OFFLINE starts (the suite runs offline)."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once it is closed


def test_a_hub_that_refuses_the_connection_turns_the_process_offline(online, monkeypatch):
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    assert settle_offline_mode() is True and constants.HF_HUB_OFFLINE is True


def test_a_hub_that_answers_keeps_the_process_online(online, monkeypatch):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        assert settle_offline_mode() is False and constants.HF_HUB_OFFLINE is False


def test_offline_by_the_environment_is_not_probed(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "ENDPOINT", "http://no-such-host.invalid")
    assert settle_offline_mode(timeout=0.0) is True


def test_pretrained_weights_fail_at_once_without_a_hub(online, monkeypatch):
    """No retries: the first request finds the process offline, and the error says what to do."""
    from vitprune.errors import VitpruneError
    from vitprune.models import create_model

    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(VitpruneError, match=r"^could not load pretrained weights for deit_tiny_patch16_224 \(offline, "
                                            r"and not in the local Hugging Face cache\); pass --checkpoint PATH"):
        create_model("deit_tiny_patch16_224", pretrained=True)
