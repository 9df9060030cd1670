"""Drift-and-recover episodes: the expert drifts off its route for a while and comes back; samples are
anchored only after the drift, so their labels are the recovery; data entries check their keys."""
from __future__ import annotations

import numpy as np
import pytest

from ddrive_ros.sim.drift import Drift, DriftSpec, episode_drift, sample_drift
from ddrive_ros.sim.sample import episode_seeds, iter_samples
from ddrive_ros.sim.world import Episode
from ddrive_ros.training.sources import load_samples


def test_the_offset_ramps_in_and_ends_and_bad_drifts_are_refused():
    d = Drift(start_s=1.0, end_s=3.0, offset_m=-2.0, ramp_s=1.0)
    assert [d.offset_at(t) for t in (0.5, 1.0, 1.5, 2.0, 2.9, 3.0)] == [0.0, 0.0, -1.0, -2.0, -2.0, 0.0]
    with pytest.raises(ValueError, match="start_s < end_s"):
        Drift(2.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="unknown drift keys"):
        DriftSpec.from_dict({"max_offset": 2.0})
    with pytest.raises(ValueError, match="min_offset_m <= max_offset_m"):
        DriftSpec.from_dict({"min_offset_m": 3.0})
    with pytest.raises(ValueError, match="duration_s"):
        DriftSpec.from_dict({"duration_s": [3.0, 1.0]})
    rng = np.random.default_rng(0)
    spec = DriftSpec()
    for _ in range(50):
        d = sample_drift(rng, spec)
        assert spec.min_offset_m <= abs(d.offset_m) <= spec.max_offset_m
        assert spec.duration_s[0] <= d.end_s - d.start_s <= spec.duration_s[1]


def _moving_follow_lane_seed() -> int:
    for seed in episode_seeds(8, 40):
        ep = Episode(seed, 9.0)
        if ep.scenario.nav_command == "FOLLOW_LANE" and ep.ego_v.min() > 3.0:
            return seed
    raise AssertionError("no moving FOLLOW_LANE episode in 40")


def test_the_expert_drifts_off_its_lane_then_comes_back():
    seed = _moving_follow_lane_seed()
    drift = Drift(start_s=1.0, end_s=3.0, offset_m=2.0)
    plain, drifted = Episode(seed, 9.0), Episode(seed, 9.0, drift=drift)
    dev = drifted.ego_main_sd[:, 1] - plain.ego_main_sd[:, 1]
    k_end = int(round(drift.end_s / drifted.dt))
    assert np.abs(dev[:int(round(drift.start_s / drifted.dt))]).max() < 1e-9  # untouched before
    assert dev[k_end] > 0.5, "it drifted left"
    assert np.abs(dev[-20:]).max() < 0.1, "and is back on the route"


def test_drift_samples_are_anchored_after_the_drift_and_the_source_passes_it_on():
    samples = list(iter_samples(8, 3, duration_s=9.0, drift=DriftSpec()))
    assert samples
    for s in samples:
        d = episode_drift(s.episode_seed, DriftSpec())
        assert s.t0 >= d.end_s - 1e-9
    plain = list(iter_samples(8, 3, duration_s=9.0))
    assert len(samples) < len(plain)
    assert len(load_samples({"source": "world", "seed": 8, "episodes": 3, "duration_s": 9.0, "drift": {}})) == len(samples)
    with pytest.raises(ValueError, match="unknown keys .'drfit'."):
        load_samples({"source": "world", "seed": 8, "episodes": 3, "drfit": {}})
