"""Synthetic world: determinism, expert behaviour, labels, cameras, renderer, samples."""
from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from ddrive_ros import share_dir
from ddrive_ros.sim.camera import default_cameras, rotation_to_quaternion
from ddrive_ros.sim.labels import (
    CRITICAL_OBJECTS,
    HORIZON_STEPS,
    MAX_EXPLANATION_TOKENS,
    critical_objects,
    explanation,
    load_words,
    meta_behavior,
    unknown_words,
)
from ddrive_ros.sim.polyline import Polyline
from ddrive_ros.sim.render import WHITE, Renderer, build_static, clip_polygon
from ddrive_ros.sim.road import Road, Route
from ddrive_ros.sim.sample import (
    EGO_BOX_OFFSET,
    EGO_HALF_EXTENTS,
    episode_seeds,
    iter_samples,
    make_sample,
    valid_anchor_frames,
)
from ddrive_ros.sim.scenario import sample_scenario
from ddrive_ros.timeline import OUTPUT_TIMES as FUTURE_TIMES
from ddrive_ros.sim.world import SIM_DT, Episode
from ddrive_ros.observation import CAMERAS, NAV_COMMANDS
from ddrive_ros.plan import MetaBehavior

SEEDS = list(range(10))


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    return [Episode(s, duration_s=12.0) for s in SEEDS]


# -- determinism ------------------------------------------------------------------------------
def test_episode_is_deterministic_by_seed():
    a, b, c = Episode(7, 8.0), Episode(7, 8.0), Episode(8, 8.0)
    for name in ("ego_xy", "ego_yaw", "ego_v", "ego_yaw_rate", "agent_xy", "agent_v"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert list(a.nav_command) == list(b.nav_command) and a.reasons == b.reasons
    assert a.ego_xy.shape != c.ego_xy.shape or not np.array_equal(a.ego_xy, c.ego_xy) or a.n_agents != c.n_agents
    r = Renderer()
    np.testing.assert_array_equal(r.render(a, 40), r.render(b, 40))


def test_iter_samples_is_deterministic_and_seeds_are_spread():
    first = list(iter_samples(3, 1, duration_s=7.5))
    second = list(iter_samples(3, 1, duration_s=7.5))
    assert len(first) == len(second) == 2
    for x, y in zip(first, second):
        np.testing.assert_array_equal(x.observation.images, y.observation.images)
        np.testing.assert_array_equal(x.future_xy, y.future_xy)
        assert x.labels.explanation == y.labels.explanation
    seeds = episode_seeds(0, 50)
    assert len(set(seeds)) == 50 and episode_seeds(0, 3) == seeds[:3] and episode_seeds(1, 3) != seeds[:3]


def test_iter_samples_keeps_only_the_episodes_of_the_commands_asked():
    wanted = ("CHANGE_LANE_LEFT", "CHANGE_LANE_RIGHT")
    kept = list(iter_samples(9, 12, duration_s=7.5, stride_s=1.0, commands=wanted))
    every = list(iter_samples(9, 12, duration_s=7.5, stride_s=1.0))
    expected = [x for x in every if sample_scenario(x.episode_seed, 7.5).nav_command in wanted]
    assert 0 < len(expected) < len(every)
    assert [(x.episode_seed, x.t0) for x in kept] == [(x.episode_seed, x.t0) for x in expected]
    np.testing.assert_array_equal(kept[0].observation.images, expected[0].observation.images)
    with pytest.raises(ValueError, match="TURN_SIDEWAYS"):
        list(iter_samples(9, 1, commands=("TURN_SIDEWAYS",)))


# -- simulation -------------------------------------------------------------------------------
def test_episode_timing_grid():
    ep = Episode(1, 12.0)
    assert ep.n_steps == 241 and SIM_DT == 0.05
    assert len(ep.frames) == 121 and ep.frames[10].t == pytest.approx(1.0) and ep.frames[10].step == 20
    assert valid_anchor_frames(ep) == list(range(20, 71, 5))  # t0 = 2.0 .. 7.0 s
    assert valid_anchor_frames(Episode(1, 5.0)) == []  # shorter than past + future: simulates, no anchors
    with pytest.raises(ValueError):
        Episode(1, 0.05)


def _box(centre: np.ndarray, yaw: float, half: np.ndarray) -> np.ndarray:
    r = np.array([[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]])
    return (np.array([[1, 1], [1, -1], [-1, -1], [-1, 1]]) * half) @ r.T + centre


def _overlap(a: np.ndarray, b: np.ndarray) -> bool:
    for poly in (a, b):
        for i in range(4):
            e = poly[(i + 1) % 4] - poly[i]
            n = np.array([-e[1], e[0]])
            if (a @ n).max() < (b @ n).min() or (b @ n).max() < (a @ n).min():
                return False
    return True


def test_expert_drives_plausibly_and_never_collides(episodes):
    for ep in episodes:
        assert np.all(ep.ego_v >= 0) and ep.ego_v.max() <= 15.0
        assert np.all(np.abs(ep.ego_accel) <= 7.0 + 1e-9)
        lateral = np.abs(ep.scenario.ego.route.path.project(ep.ego_xy)[1])
        assert lateral.max() < 1.0, f"seed {ep.seed}: the expert left its route by {lateral.max():.2f} m"
        assert set(ep.nav_command) <= set(NAV_COMMANDS)
        heading = np.stack([np.cos(ep.ego_yaw), np.sin(ep.ego_yaw)], axis=1)
        centres = ep.ego_xy + EGO_BOX_OFFSET * heading
        for k in range(0, ep.n_steps, 2):
            near = np.flatnonzero(np.hypot(*(ep.agent_xy[:, k] - centres[k]).T) < 8.0) if ep.n_agents else []
            ego_box = _box(centres[k], ep.ego_yaw[k], EGO_HALF_EXTENTS)
            for a in near:
                assert not _overlap(ego_box, _box(ep.agent_xy[a, k], ep.agent_yaw[a, k], ep.agent_size[a, :2] / 2)), (
                    f"seed {ep.seed}: ego hits {ep.agent_kind[a]} {a} at t={k * SIM_DT:.2f}")


def test_world_covers_the_scenario_kinds():
    kinds, commands, reasons = set(), set(), set()
    for seed in range(40):
        sc = sample_scenario(seed)  # scenario only: no simulation needed
        kinds.add(sc.kind)
        commands.add(sc.nav_command)
        if sc.road_map.intersection is not None:
            reasons.add(sc.road_map.intersection.control)
    assert kinds == {"straight", "curve", "intersection", "crosswalk"}
    assert set(NAV_COMMANDS) <= commands
    assert reasons == {"light", "stop_sign"}


def test_polyline_projection_round_trip():
    s = np.arange(0.0, 200.0, 0.5)
    line = Polyline.from_curvature(s, np.where(s > 50, 1 / 80.0, 0.0))
    q = np.array([10.0, 60.0, 120.0, 170.0])
    pts, _ = line.pose_at(q, np.array([1.5, -2.0, 3.0, -0.5]))
    s_back, d_back = line.project(pts)
    np.testing.assert_allclose(s_back, q, atol=0.02)
    np.testing.assert_allclose(d_back, [1.5, -2.0, 3.0, -0.5], atol=0.02)


# -- labels -----------------------------------------------------------------------------------
def test_critical_objects_are_exactly_the_schema_fields():
    schema = yaml.safe_load((share_dir() / "config" / "schema" / "fast_ddrive.yaml").read_text())
    section = next(s for s in schema["sections"] if s["name"] == "critical_objects")
    assert tuple(f["name"] for f in section["fields"]) == CRITICAL_OBJECTS


def test_every_explanation_uses_only_vocabulary_words(episodes):
    words = load_words()
    assert {"the", "ego", "vehicle", ",", "."} <= words
    seen = set()
    for ep in episodes:
        for frame in ep.frames:
            k = frame.step
            if k + HORIZON_STEPS >= ep.n_steps:
                break
            objects = critical_objects(ep, k)
            meta = meta_behavior(ep, k)
            text = explanation(ep, k, meta, objects)
            assert not unknown_words(text, words), f"seed {ep.seed} step {k}: {text!r}"
            assert 0 < len(text.split()) <= MAX_EXPLANATION_TOKENS
            assert text == text.lower() and text.endswith(" .")
            assert set(objects) == set(CRITICAL_OBJECTS) and all(isinstance(v, bool) for v in objects.values())
            seen.add(text)
    assert len(seen) > 10  # explanations vary with the scene


def test_meta_behavior_values_are_valid(episodes):
    lon, lat = set(), set()
    for ep in episodes:
        for k in range(40, ep.n_steps - HORIZON_STEPS, 10):
            m = meta_behavior(ep, k)
            assert m.longitudinal in ("KEEP", "ACCELERATE", "DECELERATE", "STOP")
            assert m.lateral in ("STRAIGHT", "LEFT_TURN", "RIGHT_TURN", "LEFT_CHANGE", "RIGHT_CHANGE")
            assert 0.0 <= m.target_speed <= 99.9
            assert m.turn_signal == ("LEFT" if m.lateral.startswith("LEFT") else
                                     "RIGHT" if m.lateral.startswith("RIGHT") else "OFF")
            lon.add(m.longitudinal)
            lat.add(m.lateral)
    assert len(lon) >= 3 and len(lat) >= 2


def _fake_episode(speed: np.ndarray, lateral: np.ndarray, yaw: np.ndarray) -> SimpleNamespace:
    """Minimal episode on a straight main road for threshold checks."""
    n = len(speed)
    x = np.concatenate([[0.0], np.cumsum(speed[:-1] * SIM_DT)])
    ref = Polyline.from_curvature(np.arange(-50.0, 400.0, 0.5), np.zeros(900))
    route = Route(ref, np.full(900, 10.0), "follow")
    road = Road(ref, 2, 1, 10.0)
    sc = SimpleNamespace(road_map=SimpleNamespace(main=road), ego=SimpleNamespace(route=route))
    return SimpleNamespace(ego_v=speed, ego_xy=np.stack([x, lateral], 1), ego_yaw=yaw, n_steps=n, dt=SIM_DT,
                           duration_s=(n - 1) * SIM_DT, ego_main_sd=np.stack([x, lateral], 1),
                           ego_s=x, scenario=sc)


@pytest.mark.parametrize("v_start, v_end, expected", [
    (10.0, 10.5, "KEEP"), (5.0, 7.0, "ACCELERATE"), (10.0, 8.0, "DECELERATE"), (6.0, 0.0, "STOP"), (0.0, 0.0, "STOP"),
])
def test_longitudinal_thresholds(v_start, v_end, expected):
    n = HORIZON_STEPS + 1
    speed = np.interp(np.arange(n), [0, 60, n - 1], [v_start, v_end, v_end])
    ep = _fake_episode(speed, np.zeros(n), np.zeros(n))
    m = meta_behavior(ep, 0)
    assert m.longitudinal == expected and m.target_speed == pytest.approx(round(v_end, 1))


@pytest.mark.parametrize("offset, yaw_end, expected", [
    (0.0, 0.0, "STRAIGHT"), (1.5, 0.0, "STRAIGHT"), (3.5, 0.05, "LEFT_CHANGE"), (-3.5, -0.05, "RIGHT_CHANGE"),
    (8.0, np.radians(80), "LEFT_TURN"), (-8.0, np.radians(-80), "RIGHT_TURN"),
])
def test_lateral_thresholds(offset, yaw_end, expected):
    n = HORIZON_STEPS + 1
    ramp = np.clip(np.arange(n) / 80.0, 0, 1)
    ep = _fake_episode(np.full(n, 8.0), offset * ramp, yaw_end * ramp)
    assert meta_behavior(ep, 0).lateral == expected


# -- cameras and renderer ---------------------------------------------------------------------
def test_camera_projection_geometry():
    cams = {c.name: c for c in default_cameras(160, 96)}
    front, left, right = cams["front"], cams["left_front"], cams["right_front"]
    uv, ok = front.project(np.array([[60.0, 0.0, front.z], [10.0, 0.0, 0.0]]))
    assert ok.all() and uv[0, 0] == pytest.approx(front.cx) and uv[1, 0] == pytest.approx(front.cx)
    assert uv[0, 1] < front.cy < uv[1, 1]  # pitched down: eye level above the centre, road 10 m ahead below it
    on_left, on_right = np.array([[8.0, 8.0, 0.5]]), np.array([[8.0, -8.0, 0.5]])
    assert left.in_image(on_left)[0] and not left.in_image(on_right)[0]
    assert right.in_image(on_right)[0] and not right.in_image(on_left)[0]
    assert not front.project(np.array([[-5.0, 0.0, 1.0]]))[1][0]  # behind: not in front
    assert front.hfov < left.hfov and front.fx > left.fx  # narrower front, wide sides
    info = front.camera_info()
    assert info["k"][0] == front.fx and info["k"][2] == front.cx and info["p"][5] == front.fy
    assert info["frame_id"] == "camera_front"
    for cam in cams.values():  # mount quaternion rotates base_link axes onto the optical axes
        x, y, z, w = rotation_to_quaternion(cam.rotation)
        r = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                      [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                      [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        np.testing.assert_allclose(r, cam.rotation, atol=1e-12)


def test_near_plane_clipping_keeps_the_visible_part():
    square = np.array([[-1.0, 0.0, -1.0], [1.0, 0.0, -1.0], [1.0, 0.0, 3.0], [-1.0, 0.0, 3.0]])
    clipped = clip_polygon(square, 0.5)
    assert clipped[:, 2].min() == pytest.approx(0.5) and len(clipped) == 4
    assert len(clip_polygon(square - [0, 0, 10], 0.5)) == 0


def test_renderer_draws_sky_road_and_is_fast():
    ep = Episode(5, 8.0)
    r = Renderer(width=160, height=96)
    r.render(ep, 0)
    t = time.perf_counter()
    images = [r.render(ep, k) for k in range(0, 40, 4)]
    ms_per_image = (time.perf_counter() - t) / (len(images) * 3) * 1e3
    img = images[0]
    assert img.shape == (3, 96, 160, 3) and img.dtype == np.uint8
    front = img[CAMERAS.index("front")]
    sky, ground = front[2].astype(int), front[-2, 60:100].astype(int)
    assert np.all(sky[:, 2] > sky[:, 0])  # blue sky on top
    assert np.mean(np.ptp(ground, axis=1) < 25) > 0.5  # grey road under the car
    assert ms_per_image < 25.0, f"rendering took {ms_per_image:.1f} ms per image"
    wide = Renderer(width=320, height=192).render(ep, 0)
    assert wide.shape == (3, 192, 320, 3)


def _divider_segments_at(st, d: float, main: Road, tol: float = 0.3) -> np.ndarray:
    """Main-road s of the white segments whose midpoints lie on the line at offset d."""
    seg = st.lines[WHITE][0]
    mid = seg[:, :, :2].mean(axis=1)
    s, dd = main.ref.project(mid)
    return np.sort(s[np.abs(dd - d) < tol])


def test_a_lane_change_crosses_a_divider_painted_solid_up_to_where_the_change_starts():
    lane_change = other = None
    for seed in range(200):
        sc = sample_scenario(seed)
        if sc.nav_command.startswith("CHANGE_LANE") and lane_change is None:
            lane_change = sc
        elif sc.road_map.main.n_forward > 1 and not sc.nav_command.startswith("CHANGE_LANE") and other is None:
            other = sc
    assert lane_change is not None and other is not None
    assert other.road_map.solid_dividers == []
    (solid,) = lane_change.road_map.solid_dividers
    ego = lane_change.ego
    target = ego.lane - 1 if lane_change.nav_command == "CHANGE_LANE_LEFT" else ego.lane + 1
    assert solid.lane == min(ego.lane, target)
    assert solid.d == pytest.approx((lane_change.road_map.main.lane_d(ego.lane) + lane_change.road_map.main.lane_d(target)) / 2)
    # the route leaves its lane where the divider stops being solid
    start = ego.route.maneuver_span[0]
    main = lane_change.road_map.main
    xy = ego.route.path.point_at(np.array([start - 5.0, start + 15.0]))
    _, d = main.ref.project(xy)
    assert abs(d[0] - main.lane_d(ego.lane)) < 0.05 and abs(d[1] - main.lane_d(ego.lane)) > 0.3
    st = build_static(lane_change.road_map, (-30.0, 150.0))
    s = _divider_segments_at(st, solid.d, main)
    before, after = s[s < solid.s_hi - 1.0], s[s > solid.s_hi + 1.0]
    assert len(before) and np.all(np.diff(before) < 2.0)  # unbroken: a segment every 1.5 m
    assert len(after) and np.max(np.diff(after)) > 4.0  # dashes: 3 m painted, 6 m gap
    # the other dividers of the same road stay dashed all along
    for i in range(1, main.n_forward):
        if -i * 3.5 != solid.d:
            s_other = _divider_segments_at(st, -i * 3.5, main)
            assert np.max(np.diff(s_other[s_other < solid.s_hi])) > 4.0


# -- samples ----------------------------------------------------------------------------------
def test_sample_fields_and_frames():
    ep = Episode(11, 8.0)
    s = make_sample(ep, 25)  # t0 = 2.5 s
    obs = s.observation
    obs.validate()
    assert obs.images.shape == (2, 3, 96, 160, 3) and obs.stamp == pytest.approx(2.5)
    r = Renderer()
    np.testing.assert_array_equal(obs.images[0], r.render(ep, 40))  # t0 - 0.5 s
    np.testing.assert_array_equal(obs.images[1], r.render(ep, 50))
    assert s.future_xy.shape == (20, 2) and np.allclose(s.future_times, FUTURE_TIMES)
    assert np.all(s.future_xy[:, 0] >= -0.5) and np.all(s.future_xy[:, 0] <= 99.9)
    np.testing.assert_allclose(s.labels.waypoints, s.future_xy[1::2])
    np.testing.assert_allclose(s.labels.waypoint_times, np.arange(1, 11) * 0.5)
    assert s.labels.schema == "fast_ddrive" and isinstance(s.labels.meta, MetaBehavior)
    assert set(s.labels.critical_objects) == set(CRITICAL_OBJECTS)
    assert all(s.has_labels.values())
    assert obs.past_xy.shape == (4, 2) and np.all(np.diff(obs.past_xy[:, 0]) >= -1e-9)  # oldest first
    assert obs.speed == pytest.approx(ep.ego_v[50])
    a = ep.n_agents
    assert s.objects_future.shape == (a, 20, 2) and s.objects_half_extents.shape == (a, 2)
    assert s.objects_yaw.shape == (a, 20) and len(s.objects_kind) == a
    with pytest.raises(ValueError):
        make_sample(ep, 10)  # only 1 s of past


def test_route_sentence_names_the_bend_ahead_and_its_side_where_the_expert_bends():
    """The route sentence is read off the road the plan will cover (docs/training.md, "why y = 0 at curves"):
    where a lane-keeping expert's 5 s future bends by more than 1 m, the sentence says "following the curve"
    and names the side the future bends to; "keeping its lane" never sits above such a future."""
    from ddrive_ros.sample import future_in_range
    from ddrive_ros.trajectory import world_to_ego

    bent_named = bent_total = 0
    curve_episodes = [Episode(s, 12.0) for s in episode_seeds(3, 60) if sample_scenario(s).kind == "curve"][:6]
    assert curve_episodes
    for ep in curve_episodes:
        for frame in valid_anchor_frames(ep, 0.5):
            k = ep.frames[frame].step
            future = world_to_ego(ep.ego_xy[k + np.round(FUTURE_TIMES / ep.dt).astype(int)], ep.ego_xy[k],
                                  float(ep.ego_yaw[k]))
            meta = meta_behavior(ep, k)
            if not future_in_range(future) or meta.lateral != "STRAIGHT" or abs(future[-1, 1]) <= 1.0:
                continue
            text = explanation(ep, k, meta, critical_objects(ep, k))
            assert "keeping its lane" not in text, (ep.seed, k, text)
            bent_total += 1
            side = "left" if future[-1, 1] > 0 else "right"
            bent_named += f"following the curve of the road to the {side}" in text
    assert bent_total >= 10 and bent_named >= 0.9 * bent_total, (bent_named, bent_total)
