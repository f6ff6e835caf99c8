"""The silence map routes, over a map saved as the compiler saves one (small, random)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import torch
from zerolayer.artifacts.silence_map import BIN_EDGES, KINDS, KindStats, SilenceMap

from tests.gateway.conftest import Gateway, GatewayFactory
from tests.gateway.test_api import assert_openai_error

MAP = "/v1/models/smollm2-135m/silence_map"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SilenceMap]:
    """A 4-layer, 48-channel map over 6 samples in <root>/smollm2-135m/silence_map."""
    g = torch.Generator().manual_seed(0)
    layers, channels, samples = 4, 48, 6
    stats = {}
    for kind in KINDS:
        mean_abs = torch.rand(layers, channels, generator=g) * 0.1
        hist = torch.randint(0, 50, (layers, channels, len(BIN_EDGES) - 1), generator=g)
        stats[kind] = KindStats(
            mean_abs=mean_abs,
            mean=mean_abs * 0.1,
            rms=mean_abs * 1.3,
            max_abs=mean_abs * 7,
            hist=hist,
            sample_mean_abs=torch.rand(layers, samples, channels, generator=g) * 0.1,
        )
    smap = SilenceMap(stats, {"model": "smollm2-135m", "samples": samples, "seq_len": 64})
    root = tmp_path_factory.mktemp("mapped")
    smap.save(root / "smollm2-135m" / "silence_map")
    return root, SilenceMap.load(root / "smollm2-135m" / "silence_map")


@pytest.fixture
def mapped(make_gateway: GatewayFactory, saved: tuple[Path, SilenceMap]) -> Gateway:
    return make_gateway(settings={"artifacts_dir": str(saved[0])})


def test_the_overview_is_the_measured_map(mapped: Gateway, saved: tuple[Path, SilenceMap]) -> None:
    smap = saved[1]
    body = mapped.client.get(MAP + "?quantile=0.2", headers=mapped.auth).json()
    assert body["object"] == "silence_map" and body["quantile"] == 0.2
    for kind, st in smap.stats.items():
        got = body["kinds"][kind]
        frac = st.silent_fraction(0.2)
        assert (got["layers"], got["channels"]) == tuple(frac.shape)
        u8 = base64.b64decode(got["silent_u8"])
        assert len(u8) == frac.numel()
        # a byte is the share * 255: any cell read back is within half a step
        for i in (0, frac.numel() // 2, frac.numel() - 1):
            assert abs(u8[i] / 255 - float(frac.flatten()[i])) <= 0.5 / 255 + 1e-6
        assert got["thresholds"] == smap.summary(0.2, 0.5, top=0)[kind]["thresholds"]


def test_a_channel_has_its_activation_on_each_calibration_sample(
    mapped: Gateway, saved: tuple[Path, SilenceMap]
) -> None:
    smap = saved[1]
    st = smap.stats["mlp"]
    r = mapped.client.get(MAP + "/mlp/3/17", headers=mapped.admin)  # the admin key reads too
    assert r.status_code == 200, r.text
    body = r.json()
    want = [float(v) for v in st.sample_mean_abs[3, :, 17]]
    assert len(body["samples"]) == st.sample_mean_abs.shape[1] == len(want)
    assert body["samples"] == pytest.approx(want, rel=1e-5, abs=1e-7)
    assert body["mean_abs"] == pytest.approx(float(st.mean_abs[3, 17]), rel=1e-5)


@pytest.mark.parametrize(
    ("path", "status", "param"),
    [
        (MAP + "?quantile=2", 400, "quantile"),
        (MAP + "?silent_share=abc", 400, "silent_share"),
        (MAP + "/mlp/4/0", 400, "layer"),
        (MAP + "/mlp/0/48", 400, "channel"),
        (MAP + "/nope/0/0", 400, "kind"),
        (MAP + "/mlp/x/0", 400, "layer"),
        ("/v1/models/no-such-model/silence_map", 404, "model"),
    ],
)
def test_bad_requests_get_clear_4xx(mapped: Gateway, path: str, status: int, param: str) -> None:
    err = assert_openai_error(mapped.client.get(path, headers=mapped.auth), status)
    assert err["param"] == param, err


def test_a_model_without_a_map_and_a_wrong_key(make_gateway: GatewayFactory, tmp_path: Any) -> None:
    gw = make_gateway(settings={"artifacts_dir": str(tmp_path)})
    err = assert_openai_error(gw.client.get(MAP, headers=gw.auth), 404)
    assert err["code"] == "silence_map_not_found"
    wrong = {"Authorization": "Bearer zl-nope"}
    assert_openai_error(gw.client.get(MAP, headers=wrong), 401)


def test_the_replies_are_what_the_routes_declare(mapped: Gateway) -> None:
    from tests.gateway.test_replies import declared

    for path, route in (
        (MAP, "/v1/models/{model}/silence_map"),
        (MAP + "/mlp/3/17", "/v1/models/{model}/silence_map/{kind}/{layer}/{channel}"),
    ):
        r = mapped.client.get(path, headers=mapped.auth)
        assert r.status_code == 200, r.text
        declared(mapped, "GET", route).model_validate(r.json())
