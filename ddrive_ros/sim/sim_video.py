"""Pictures of closed-loop runs, drawn with `ddrive_ros.evaluation.draw`: per chosen episode an MP4
(bird's-eye view with lanes, road users, the plan being tracked, its rollouts and the expert's path
on the same episode, beside the front camera with the plan projected), and a bar chart of PDMS per
method."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ddrive_ros.evaluation import draw
from ddrive_ros.sim.closed_loop import ClosedLoopWorld
from ddrive_ros.sim.closed_loop_run import EpisodeRun, PlanRecord
from ddrive_ros.sim.road import LANE_WIDTH
from ddrive_ros.sim.world import STEPS_PER_FRAME
from ddrive_ros.trajectory import world_to_ego

BEV_SIZE = 240  # px: small on purpose, docs/ must stay a few MB
CAMERA_HEIGHT = 144
LANE_REACH_M = 90.0


def lane_lines(world: ClosedLoopWorld, k: int) -> list[np.ndarray]:
    """Lane boundaries near the ego, in the ego frame at step k."""
    out = []
    pose_xy, yaw = world.ego_xy[k], float(world.ego_yaw[k])
    s_main = float(world.ego_main_sd[k, 0])
    for i, road in enumerate(world.scenario.road_map.roads):
        s = np.arange(s_main - 30.0, s_main + LANE_REACH_M, 2.0) if i == 0 else np.arange(road.ref.s[0], road.ref.s[-1], 2.0)
        for j in range(road.n_lanes + 1):
            d = road.edge_right + j * LANE_WIDTH
            pts, _ = road.ref.pose_at(s, np.full(len(s), d))
            local = world_to_ego(pts, pose_xy, yaw)
            keep = (np.abs(local[:, 1]) < 60.0) & (local[:, 0] > -30.0) & (local[:, 0] < LANE_REACH_M)
            if keep.sum() >= 2:
                out.append(local[keep])
    return out


def _active_plan(plans: list[PlanRecord], k: int) -> PlanRecord | None:
    live = [p for p in plans if p.k_apply <= k]
    return live[-1] if live else None


def bev_frame(run: EpisodeRun, k: int, expert: EpisodeRun | None = None, size: int = BEV_SIZE) -> np.ndarray:
    """The bird's-eye view of step k: lanes, road users, the plan being tracked, its rollouts, the
    expert's path from the same step of its own run (green), and the run's score."""
    from ddrive_ros.sim.scorer import EGO_HALF

    w = run.world
    pose_xy, yaw = w.ego_xy[k], float(w.ego_yaw[k])
    agents = []
    for a in range(w.n_agents):
        c = world_to_ego(w.agent_xy[a, k][None], pose_xy, yaw)[0]
        agents.append(draw.Box(float(c[0]), float(c[1]), float(w.agent_yaw[a, k] - yaw), *(w.agent_size[a, :2] / 2)))
    p = _active_plan(run.plans, k)
    plan_xy = world_to_ego(p.world_plan.xy[1:], pose_xy, yaw) if p else None
    rollouts = [world_to_ego(r, pose_xy, yaw) for r in p.rollouts_world] if p else []
    truth = None
    if expert is not None:
        e = expert.world
        truth = world_to_ego(e.ego_xy[k:min(k + 100, e.k + 1):5], pose_xy, yaw)
    s = run.score
    scene = draw.Scene(plan=plan_xy, truth=truth, rollouts=rollouts, agents=agents, lanes=lane_lines(w, k),
                       ego=draw.Box(1.4, 0.0, 0.0, float(EGO_HALF[0]), float(EGO_HALF[1])),
                       title=f"{run.method}  seed {run.seed}  t={k * w.dt:.1f}s",
                       lines=[f"{w.nav_command[k]}  v {w.ego_v[k]:.1f} m/s",
                              f"PDMS {s.pdms:.2f} NC {s.nc:g} DAC {s.dac:g} EP {s.ep:.2f} TTC {s.ttc:g} C {s.comfort:g}",
                              p.meta if p else "no plan yet"])
    return draw.bev(scene, size=size, forward_m=60.0)


def episode_frames(run: EpisodeRun, renderer, expert: EpisodeRun | None = None) -> list[np.ndarray]:
    """One frame per camera step of the driven part of the episode: the bird's-eye view beside the
    front camera with the expert's path and the plan projected."""
    w = run.world
    front = renderer.cameras[1]
    frames = []
    for k in range(w.start_step, w.k + 1, STEPS_PER_FRAME):
        bev = bev_frame(run, k, expert)
        pose_xy, yaw = w.ego_xy[k], float(w.ego_yaw[k])
        p = _active_plan(run.plans, k)
        paths = []
        if expert is not None:
            e = expert.world
            paths.append((world_to_ego(e.ego_xy[k:min(k + 100, e.k + 1):5], pose_xy, yaw), draw.TRUTH))
        if p is not None:
            paths.append((world_to_ego(p.world_plan.xy[1:], pose_xy, yaw), draw.PLAN))
        cam = draw.camera_strip([w.rendered(k, renderer)[1]], [front], paths, height=CAMERA_HEIGHT)
        frames.append(draw.side_by_side(bev, cam))
    return frames


def write_episode_video(out_dir: Path, run: EpisodeRun, renderer, expert: EpisodeRun | None = None) -> Path:
    name = f"episode_{run.seed}_{run.method.replace(' ', '_').replace('=', '')}.mp4"
    return draw.write_video(Path(out_dir) / name, episode_frames(run, renderer, expert), fps=10.0)


def write_summary(out_dir: Path, rows: list[dict]) -> Path:
    img = draw.bar_chart([r["method"] for r in rows], [r["pdms"] for r in rows],
                         title=f"closed-loop PDMS, {rows[0]['episodes'] if rows else 0} episodes")
    return draw.write_png(Path(out_dir) / "pdms_by_method.png", img)
