"""Where training samples come from: the synthetic world or a user's rosbags, behind one function."""
from __future__ import annotations

import logging
from typing import Any

from ddrive_ros.bags.reader import extract_samples
from ddrive_ros.sample import Sample
from ddrive_ros.sim.sample import samples_from_world

log = logging.getLogger(__name__)


def load_samples(data: dict[str, Any]) -> list[Sample]:
    """Samples from the synthetic world (`source: world`) or from bag folders (`source: bags`): one
    interface, the same `Sample`s, so training never asks where they came from."""
    source = data.get("source", "world")
    if source == "world":
        return list(samples_from_world(int(data.get("seed", 0)), int(data.get("episodes", 40)),
                                       duration_s=float(data.get("duration_s", 12.0)), stride_s=float(data.get("stride_s", 0.5))))
    if source == "bags":
        out = []
        for bag in data["bags"]:
            samples, report = extract_samples(bag)
            log.info("%s", report.summary())
            out += samples
        return out
    raise ValueError(f"unknown data source {source!r} (world | bags)")
