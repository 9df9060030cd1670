"""OpenCV renderer of the synthetic world: flat-shaded, low resolution, a few ms per image.

Layers, back to front: sky and grass (cached per camera), sidewalks, asphalt, lane markings, stop
lines and crosswalks (all on the ground plane, so drawn in layer order), then solid objects (road
users as boxes, traffic lights, stop signs) sorted far to near. Every primitive is clipped against
the camera's near plane in 3D before projection, so geometry that passes beside or behind a camera
stays correct.

Colours (RGB) are fixed per class so that a small model can tell them apart: vehicles blue (shade
varies), pedestrians orange, cyclists magenta, lights by state, stop signs red.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import cv2
import numpy as np

from ddrive_ros.sim.camera import DEFAULT_HEIGHT, DEFAULT_WIDTH, CameraModel, default_cameras
from ddrive_ros.sim.road import LANE_WIDTH, SIDEWALK_WIDTH, Road, RoadMap
from ddrive_ros.sim.scenario import VEHICLE
from ddrive_ros.sim.traffic_light import GREEN, RED, YELLOW

logger = logging.getLogger(__name__)

SHIFT = 4  # fixed-point bits for sub-pixel drawing
_SCALE = float(1 << SHIFT)
VIEW_RANGE_M = 160.0

SKY_TOP, SKY_HORIZON = (105, 155, 225), (195, 218, 240)
GRASS_NEAR, GRASS_FAR = (70, 112, 52), (120, 150, 100)
SIDEWALK = (165, 163, 155)
ASPHALT = (88, 88, 94)
WHITE = (238, 238, 238)
YELLOW_PAINT = (235, 195, 45)
LIGHT_HEAD = (28, 28, 30)
POLE = (70, 70, 72)
LAMP = {RED: (255, 40, 40), YELLOW: (255, 205, 0), GREEN: (40, 235, 70)}
LAMP_OFF = (55, 55, 55)
STOP_RED = (215, 25, 35)
BRAKE_ON, BRAKE_OFF = (255, 30, 30), (110, 10, 10)
BRAKING_ACCEL = -1.0  # m/s^2: brake lights on below this

# box faces over corners 0..3 bottom (+l+w, +l-w, -l-w, -l+w), 4..7 the same on top
_FACES = ((0, 1, 5, 4), (2, 3, 7, 6), (3, 0, 4, 7), (1, 2, 6, 5), (4, 5, 6, 7))
_FACE_INDEX = np.array(_FACES)
_FACE_NORMALS = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1]], dtype=float)
_FACE_SHADE = np.array([0.82, 0.72, 0.95, 0.88, 1.18])
_CORNER_SIGNS = np.array([[1, 1, 0], [1, -1, 0], [-1, -1, 0], [-1, 1, 0],
                          [1, 1, 1], [1, -1, 1], [-1, -1, 1], [-1, 1, 1]], dtype=float)


# -- clipping ---------------------------------------------------------------------------------
def clip_polygon(pc: np.ndarray, near: float) -> np.ndarray:
    """Sutherland-Hodgman against the plane z = near, vectorised over the edges."""
    inside = pc[:, 2] >= near
    if inside.all():
        return pc
    if not inside.any():
        return pc[:0]
    nxt = np.roll(pc, -1, axis=0)
    in_next = np.roll(inside, -1)
    dz = nxt[:, 2] - pc[:, 2]
    t = np.where(np.abs(dz) > 1e-12, (near - pc[:, 2]) / np.where(np.abs(dz) > 1e-12, dz, 1.0), 0.0)
    cross = pc + t[:, None] * (nxt - pc)
    cand = np.stack([pc, cross], axis=1)
    mask = np.stack([inside, inside != in_next], axis=1)
    return cand[mask]


def clip_segments(a: np.ndarray, b: np.ndarray, near: float) -> tuple[np.ndarray, np.ndarray]:
    ia, ib = a[:, 2] >= near, b[:, 2] >= near
    keep = ia | ib
    a, b, ia, ib = a[keep], b[keep], ia[keep], ib[keep]
    dz = b[:, 2] - a[:, 2]
    t = (near - a[:, 2]) / np.where(np.abs(dz) > 1e-12, dz, 1.0)
    x = a + t[:, None] * (b - a)
    return np.where(ia[:, None], a, x), np.where(ib[:, None], b, x)


def _fixed(uv: np.ndarray) -> np.ndarray:
    return np.round(np.clip(uv, -1e6, 1e6) * _SCALE).astype(np.int32)


# -- static scene -----------------------------------------------------------------------------
@dataclass
class _Static:
    """World-frame geometry of one episode that does not move."""

    polys: list[tuple[np.ndarray, tuple[int, int, int]]] = field(default_factory=list)  # ground, layer order
    lines: dict[tuple[int, int, int], list[np.ndarray]] = field(default_factory=dict)  # colour -> (K, 2, 3)
    lights: list[tuple[np.ndarray, float]] = field(default_factory=list)  # head centre (3,), facing yaw
    signs: list[tuple[np.ndarray, float]] = field(default_factory=list)  # sign centre (3,), facing yaw
    poles: list[np.ndarray] = field(default_factory=list)  # (2, 3)


def _ground(xy: np.ndarray) -> np.ndarray:
    return np.concatenate([xy, np.zeros((len(xy), 1))], axis=1)


def _strip(road: Road, s: np.ndarray, d_lo: float, d_hi: float) -> np.ndarray:
    lo, _ = road.ref.pose_at(s, np.full(len(s), d_lo))
    hi, _ = road.ref.pose_at(s, np.full(len(s), d_hi))
    return _ground(np.concatenate([lo, hi[::-1]]))


def _line_segments(road: Road, s: np.ndarray, d: float, dashed: bool, gaps: list[tuple[float, float]],
                   solid: list[tuple[float, float]] = ()) -> np.ndarray:
    """Segments of the line at offset `d`; a dashed line is solid over the `solid` s ranges."""
    keep = np.ones(len(s) - 1, dtype=bool)
    mid = 0.5 * (s[1:] + s[:-1])
    if dashed:
        dash = np.mod(mid, 9.0) < 3.0
        for lo, hi in solid:
            dash |= (mid >= lo) & (mid <= hi)
        keep &= dash
    for lo, hi in gaps:
        keep &= (mid < lo) | (mid > hi)
    pts, _ = road.ref.pose_at(s, np.full(len(s), d))
    p = _ground(pts)
    return np.stack([p[:-1], p[1:]], axis=1)[keep]


def build_static(road_map: RoadMap, s_range: tuple[float, float]) -> _Static:
    st = _Static()
    inter = road_map.intersection
    roads = road_map.roads
    ranges = [np.arange(s_range[0], s_range[1] + 1e-9, 1.5)]
    if len(roads) > 1:
        ranges.append(np.arange(-150.0, 150.0 + 1e-9, 1.5))
    gaps = [[inter.main_box] if inter else [], [inter.cross_box] if inter else []]
    for r, road in enumerate(roads):
        s = ranges[r]
        st.polys.append((_strip(road, s, road.edge_right - SIDEWALK_WIDTH, road.edge_right), SIDEWALK))
        st.polys.append((_strip(road, s, road.edge_left, road.edge_left + SIDEWALK_WIDTH), SIDEWALK))
    for r, road in enumerate(roads):
        st.polys.append((_strip(road, ranges[r], road.edge_right, road.edge_left), ASPHALT))
    for r, road in enumerate(roads):
        s = ranges[r]
        white = st.lines.setdefault(WHITE, [])
        white.append(_line_segments(road, s, road.edge_right + 0.25, False, gaps[r]))
        white.append(_line_segments(road, s, road.edge_left - 0.25, False, gaps[r]))
        for i in range(1, road.n_forward):
            solid = [(sd.s_lo, sd.s_hi) for sd in road_map.solid_dividers if r == 0 and sd.lane + 1 == i]
            white.append(_line_segments(road, s, -i * LANE_WIDTH, True, gaps[r], solid))
        for i in range(1, road.n_backward):
            white.append(_line_segments(road, s, i * 3.5, True, gaps[r]))
        st.lines.setdefault(YELLOW_PAINT, []).append(_line_segments(road, s, 0.0, False, gaps[r]))
    main = roads[0]
    for cw in road_map.crosswalks:
        d = main.edge_right + 0.3
        while d + 0.5 < main.edge_left - 0.2:
            s = np.array([cw.s_lo, cw.s_hi])
            a, _ = main.ref.pose_at(s, np.full(2, d))
            b, _ = main.ref.pose_at(s[::-1], np.full(2, d + 0.5))
            st.polys.append((_ground(np.concatenate([a, b])), WHITE))
            d += 1.0
    if inter is not None:
        # stop lines: ego direction (forward lanes) and oncoming
        for s_line, d_lo, d_hi in ((inter.main_stop[0], main.edge_right, 0.0), (inter.main_stop[1], 0.0, main.edge_left)):
            st.polys.append((_strip(main, np.array([s_line - 0.25, s_line + 0.25]), d_lo, d_hi), WHITE))
        far_s, near_s = inter.main_box[1] + 0.5, inter.main_box[0] - 0.5
        _, heading = main.ref.pose_at(inter.s_main)
        if inter.control == "light":
            # mast on the far right corner, head over the forward lanes, facing the ego's approach
            base, _ = main.ref.pose_at(far_s, main.edge_right - 1.0)
            head, _ = main.ref.pose_at(far_s, 0.5 * main.edge_right)
            st.poles.append(np.array([[*base, 0.0], [*base, 5.6]]))
            st.poles.append(np.array([[*base, 5.6], [*head, 5.6]]))
            st.lights.append((np.array([*head, 5.0]), float(heading) + np.pi))
            # the oncoming head, seen from behind
            base2, _ = main.ref.pose_at(near_s, main.edge_left + 1.0)
            st.poles.append(np.array([[*base2, 0.0], [*base2, 5.6]]))
            st.lights.append((np.array([*base2, 5.0]), float(heading)))
        else:
            sign, _ = main.ref.pose_at(inter.main_stop[0], main.edge_right - 0.8)
            st.poles.append(np.array([[*sign, 0.0], [*sign, 2.0]]))
            st.signs.append((np.array([*sign, 2.3]), float(heading) + np.pi))
            sign2, _ = main.ref.pose_at(inter.main_stop[1], main.edge_left + 0.8)
            st.poles.append(np.array([[*sign2, 0.0], [*sign2, 2.0]]))
            st.signs.append((np.array([*sign2, 2.3]), float(heading)))
    st.lines = {c: [np.concatenate(v)] for c, v in st.lines.items() if v}
    return st


# -- renderer ---------------------------------------------------------------------------------
class Renderer:
    """Renders the three cameras of an `Episode` at a simulation step."""

    def __init__(self, cameras: list[CameraModel] | None = None, width: int = DEFAULT_WIDTH,
                 height: int = DEFAULT_HEIGHT) -> None:
        self.cameras = cameras if cameras is not None else default_cameras(width, height)
        self._background = {cam.name: self._make_background(cam) for cam in self.cameras}
        self._static_episode = None  # the episode `_static` was built for (held, so its id cannot be reused)
        self._static: _Static | None = None

    @staticmethod
    def _make_background(cam: CameraModel) -> np.ndarray:
        h, w = cam.height, cam.width
        horizon = cam.horizon_v
        rows = np.arange(h, dtype=float)[:, None]
        sky_t = np.clip(rows / max(horizon, 1.0), 0.0, 1.0)
        sky = (1 - sky_t) * np.array(SKY_TOP) + sky_t * np.array(SKY_HORIZON)
        g_t = np.clip((rows - horizon) / max(h - horizon, 1.0), 0.0, 1.0) ** 0.5
        grass = (1 - g_t) * np.array(GRASS_FAR) + g_t * np.array(GRASS_NEAR)
        img = np.where(rows < horizon, sky, grass)
        return np.ascontiguousarray(np.broadcast_to(img[:, None, :], (h, w, 3)).round().astype(np.uint8))

    def _static_for(self, episode) -> _Static:
        if self._static_episode is not episode or self._static is None:
            # a world still being stepped (closed loop) says which stretch of road it may reach
            s_range = getattr(episode, "render_s_range", None)
            if s_range is None:
                s_e = episode.ego_main_sd[:, 0]
                s_range = (float(s_e.min()) - 30.0, float(s_e.max()) + VIEW_RANGE_M)
            self._static = build_static(episode.scenario.road_map, s_range)
            self._static_episode = episode
        return self._static

    def render(self, episode, step: int) -> np.ndarray:
        """(n_cameras, H, W, 3) uint8 RGB."""
        st = self._static_for(episode)
        ex, ey = episode.ego_xy[step]
        yaw = episode.ego_yaw[step]
        c, s = np.cos(yaw), np.sin(yaw)
        rot = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        origin = np.array([ex, ey, 0.0])

        def to_ego(p: np.ndarray) -> np.ndarray:
            return (p - origin) @ rot

        polys = [(to_ego(p), col) for p, col in st.polys]
        lines = {col: to_ego(v[0]) for col, v in st.lines.items()}
        for col, seg in lines.items():
            near = np.minimum(np.hypot(seg[:, 0, 0], seg[:, 0, 1]), np.hypot(seg[:, 1, 0], seg[:, 1, 1]))
            lines[col] = seg[near < VIEW_RANGE_M]
        solids = self._solids(episode, step, st, to_ego, rot)
        out = np.empty((len(self.cameras), self.cameras[0].height, self.cameras[0].width, 3), dtype=np.uint8)
        for i, cam in enumerate(self.cameras):
            out[i] = self._render_camera(cam, polys, lines, solids)
        return out

    def _solids(self, episode, step: int, st: _Static, to_ego, rot: np.ndarray) -> list[tuple]:
        """Everything with height, as (distance, kind, payload) in the ego frame."""
        items: list[tuple] = []
        ego_yaw = episode.ego_yaw[step]
        if episode.n_agents:
            xy = episode.agent_xy[:, step]
            centre = to_ego(np.concatenate([xy, np.zeros((len(xy), 1))], axis=1))
            dist = np.hypot(centre[:, 0], centre[:, 1])
            yaw_rel = episode.agent_yaw[:, step] - ego_yaw
            size = episode.agent_size
            for a in np.flatnonzero(dist < VIEW_RANGE_M):
                l, w, h = size[a] / np.array([2.0, 2.0, 1.0])
                cy_, sy_ = np.cos(yaw_rel[a]), np.sin(yaw_rel[a])
                r2 = np.array([[cy_, -sy_, 0.0], [sy_, cy_, 0.0], [0.0, 0.0, 1.0]])
                corners = (_CORNER_SIGNS * np.array([l, w, h])) @ r2.T + centre[a]
                braking = episode.agent_kind[a] == VEHICLE and episode.agent_accel[a, step] < BRAKING_ACCEL
                items.append((dist[a], "box", (corners, r2, tuple(int(x) for x in episode.agent_color[a]),
                                              episode.agent_kind[a] == VEHICLE, braking)))
        state = episode.light_state(step, 0)
        for pole in st.poles:
            p = to_ego(pole)
            items.append((float(np.hypot(*p[:, :2].mean(0))) + 0.5, "pole", p))
        for k, (centre_w, facing) in enumerate(st.lights):
            p = to_ego(centre_w[None])[0]
            items.append((float(np.hypot(p[0], p[1])), "light", (p, facing - ego_yaw, state if k == 0 else None)))
        for centre_w, facing in st.signs:
            p = to_ego(centre_w[None])[0]
            items.append((float(np.hypot(p[0], p[1])), "sign", (p, facing - ego_yaw)))
        items.sort(key=lambda it: -it[0])
        return items

    def _render_camera(self, cam: CameraModel, polys, lines, solids) -> np.ndarray:
        img = self._background[cam.name].copy()
        for poly, col in polys:
            pc = clip_polygon(cam.to_camera(poly), cam.near)
            if len(pc) >= 3:
                cv2.fillPoly(img, [_fixed(cam.project_camera(pc))], col, cv2.LINE_AA, SHIFT)
        for col, seg in lines.items():
            if not len(seg):
                continue
            a, b = clip_segments(cam.to_camera(seg[:, 0]), cam.to_camera(seg[:, 1]), cam.near)
            if not len(a):
                continue
            uv = _fixed(np.stack([cam.project_camera(a), cam.project_camera(b)], axis=1))
            lim = 2 * (1 << SHIFT) * max(cam.width, cam.height)
            ok = ~np.all((uv[:, :, 0] < -lim) | (uv[:, :, 0] > lim), axis=1)
            cv2.polylines(img, list(uv[ok]), False, col, 1, cv2.LINE_AA, SHIFT)
        for _, kind, payload in solids:
            if kind == "box":
                self._draw_box(img, cam, *payload)
            elif kind == "pole":
                a, b = clip_segments(cam.to_camera(payload[:1]), cam.to_camera(payload[1:]), cam.near)
                if len(a):
                    uv = _fixed(np.concatenate([cam.project_camera(a), cam.project_camera(b)]))
                    cv2.polylines(img, [uv], False, POLE, 1, cv2.LINE_AA, SHIFT)
            elif kind == "light":
                self._draw_light(img, cam, *payload)
            else:
                self._draw_sign(img, cam, *payload)
        return img

    @staticmethod
    def _fill(img: np.ndarray, cam: CameraModel, pts_ego: np.ndarray, col) -> bool:
        pc = clip_polygon(cam.to_camera(pts_ego), cam.near)
        if len(pc) < 3:
            return False
        cv2.fillPoly(img, [_fixed(cam.project_camera(pc))], col, cv2.LINE_AA, SHIFT)
        return True

    def _draw_box(self, img, cam: CameraModel, corners: np.ndarray, r2: np.ndarray, col, is_vehicle: bool,
                  braking: bool) -> None:
        pc = cam.to_camera(corners)
        front = pc[:, 2] >= cam.near
        if not front.any():
            return
        uv_all = None
        if front.all():
            uv = cam.project_camera(pc)
            if (uv[:, 0].max() < 0 or uv[:, 0].min() > cam.width or uv[:, 1].max() < 0
                    or uv[:, 1].min() > cam.height):
                return  # outside this camera's view
            uv_all = _fixed(uv)
        normals = (_FACE_NORMALS @ r2.T) @ cam.rotation
        centres = pc[_FACE_INDEX].mean(axis=1)
        visible = np.einsum("ij,ij->i", normals, centres) < 0
        base = np.array(col, dtype=float)
        for f in np.flatnonzero(visible):
            if uv_all is not None:
                poly = uv_all[_FACE_INDEX[f]]
            else:
                quad = clip_polygon(pc[_FACE_INDEX[f]], cam.near)
                if len(quad) < 3:
                    continue
                poly = _fixed(cam.project_camera(quad))
            shade = tuple(int(x) for x in np.clip(base * _FACE_SHADE[f], 0, 255))
            cv2.fillPoly(img, [poly], shade, cv2.LINE_AA, SHIFT)
            if is_vehicle and f == 1:  # rear face: tail / brake lamps
                self._lamps(img, cam, corners, braking)

    @staticmethod
    def _lamps(img, cam: CameraModel, corners: np.ndarray, braking: bool) -> None:
        # rear corners 2 (-l -w) and 3 (-l +w) raised to 60 % of the height, pulled 25 cm inwards
        h = corners[4, 2] - corners[0, 2]
        lamps = []
        for k, other in ((2, 3), (3, 2)):
            p = corners[k] + 0.25 * (corners[other] - corners[k]) / max(np.linalg.norm(corners[other] - corners[k]), 1e-6)
            lamps.append(p + np.array([0.0, 0.0, 0.6 * h]))
        pc = cam.to_camera(np.array(lamps))
        if np.any(pc[:, 2] < cam.near):
            return
        uv = cam.project_camera(pc)
        radius = max(1.0, cam.fx * 0.12 / pc[0, 2])
        for u, v in uv:
            cv2.circle(img, (int(round(u * _SCALE)), int(round(v * _SCALE))), int(radius * _SCALE),
                       BRAKE_ON if braking else BRAKE_OFF, -1, cv2.LINE_AA, SHIFT)

    def _draw_light(self, img, cam: CameraModel, centre: np.ndarray, facing: float, state: str | None) -> None:
        # housing 0.7 x 0.5 x 1.8 m, lamps on the face that looks along `facing`
        cy_, sy_ = np.cos(facing), np.sin(facing)
        r2 = np.array([[cy_, -sy_, 0.0], [sy_, cy_, 0.0], [0.0, 0.0, 1.0]])
        corners = (_CORNER_SIGNS * np.array([0.25, 0.35, 1.8])) @ r2.T + centre - np.array([0.0, 0.0, 0.9])
        self._draw_box(img, cam, corners, r2, LIGHT_HEAD, False, False)
        if state is None:
            return
        face_dir = r2[:, 0]
        pc_c = cam.to_camera(centre[None])[0]
        if pc_c[2] < cam.near or np.dot(face_dir @ cam.rotation, pc_c) >= 0:
            return
        for dz, lamp_state in ((0.55, RED), (0.0, YELLOW), (-0.55, GREEN)):
            p = cam.to_camera((centre + face_dir * 0.27 + np.array([0.0, 0.0, dz]))[None])[0]
            if p[2] < cam.near:
                continue
            u, v = cam.project_camera(p)
            radius = max(1.2, cam.fx * 0.25 / p[2])
            col = LAMP[lamp_state] if lamp_state == state else LAMP_OFF
            cv2.circle(img, (int(round(u * _SCALE)), int(round(v * _SCALE))), int(radius * _SCALE), col, -1,
                       cv2.LINE_AA, SHIFT)

    def _draw_sign(self, img, cam: CameraModel, centre: np.ndarray, facing: float) -> None:
        pc = cam.to_camera(centre[None])[0]
        if pc[2] < cam.near:
            return
        facing_vec = np.array([np.cos(facing), np.sin(facing), 0.0])
        front = np.dot(facing_vec @ cam.rotation, pc) < 0
        u, v = cam.project_camera(pc)
        radius = max(1.8, cam.fx * 0.45 / pc[2])
        ang = np.pi / 8 + np.arange(8) * np.pi / 4
        octagon = np.stack([u + radius * np.cos(ang), v + radius * np.sin(ang)], axis=1)
        cv2.fillPoly(img, [_fixed(octagon)], STOP_RED if front else (150, 150, 150), cv2.LINE_AA, SHIFT)
        if front and radius > 4:
            cv2.polylines(img, [_fixed(octagon)], True, WHITE, 1, cv2.LINE_AA, SHIFT)


def camera_strip(images: np.ndarray, gap: int = 2) -> np.ndarray:
    """(n, H, W, 3) -> one (H, n*W + gaps, 3) image, cameras left to right as given."""
    n, h, w, _ = images.shape
    out = np.full((h, n * w + (n - 1) * gap, 3), 255, dtype=np.uint8)
    for i in range(n):
        out[:, i * (w + gap):i * (w + gap) + w] = images[i]
    return out
