"""Plan -> visualization_msgs/MarkerArray for RViz. Stable namespaces and ids; DELETEALL first."""
from __future__ import annotations

import numpy as np

from ddrive_ros.plan import meta_text
from ddrive_ros.ros.convert import to_stamp

NS_TRAJECTORY, NS_WAYPOINTS, NS_ROLLOUTS, NS_TEXT, NS_DRAFT = "trajectory", "waypoints", "rollouts", "meta", "draft"


def speed_color(v: float, v_max: float = 15.0) -> tuple[float, float, float]:
    """Blue (slow) -> green -> red (fast)."""
    a = float(np.clip(v / v_max, 0.0, 1.0))
    if a < 0.5:
        return 0.0, 2 * a, 1.0 - 2 * a
    return 2 * (a - 0.5), 1.0 - 2 * (a - 0.5), 0.0


def plan_markers(trajectory: np.ndarray, waypoints: np.ndarray | None, rollouts: list[np.ndarray] | None,
                 meta: dict | None, stamp: float, frame_id: str, fallback: bool = False, lifetime_s: float = 0.0,
                 draft: np.ndarray | None = None):
    """Markers that expire after `lifetime_s` (0: never), so a dead node's plan disappears from RViz.
    `draft`: the waypoints before reflection, drawn as a thin orange line under the plan."""
    from geometry_msgs.msg import Point
    from std_msgs.msg import ColorRGBA
    from visualization_msgs.msg import Marker, MarkerArray

    out = MarkerArray()
    clear = Marker()
    clear.action = Marker.DELETEALL
    out.markers.append(clear)
    st = to_stamp(stamp)

    def base(ns: str, mid: int, kind: int) -> Marker:
        m = Marker()
        m.header.stamp, m.header.frame_id = st, frame_id
        m.ns, m.id, m.type, m.action = ns, mid, kind, Marker.ADD
        m.pose.orientation.w = 1.0
        m.lifetime.sec, m.lifetime.nanosec = int(lifetime_s), int(round((lifetime_s % 1.0) * 1e9))
        return m

    traj = np.asarray(trajectory, dtype=float)
    line = base(NS_TRAJECTORY, 0, Marker.LINE_STRIP)
    line.scale.x = 0.3
    line.color = ColorRGBA(r=1.0, g=0.2, b=0.2, a=1.0) if fallback else ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)
    for row in np.vstack([[0, 0, 0, 0, traj[0, 4]], traj]):
        line.points.append(Point(x=float(row[1]), y=float(row[2]), z=0.1))
        r, g, b = (1.0, 0.1, 0.1) if fallback else speed_color(row[4])
        line.colors.append(ColorRGBA(r=float(r), g=float(g), b=float(b), a=1.0))
    out.markers.append(line)

    if waypoints is not None and len(waypoints):
        sph = base(NS_WAYPOINTS, 0, Marker.SPHERE_LIST)
        sph.scale.x = sph.scale.y = sph.scale.z = 0.5
        sph.color = ColorRGBA(r=1.0, g=0.8, b=0.0, a=1.0)
        sph.points = [Point(x=float(x), y=float(y), z=0.1) for x, y in np.asarray(waypoints, dtype=float)]
        out.markers.append(sph)

    for i, roll in enumerate(rollouts or []):
        thin = base(NS_ROLLOUTS, i, Marker.LINE_STRIP)
        thin.scale.x = 0.08
        thin.color = ColorRGBA(r=0.6, g=0.6, b=1.0, a=0.6)
        thin.points = [Point(x=float(x), y=float(y), z=0.05) for x, y in np.asarray(roll, dtype=float)[:, :2]]
        out.markers.append(thin)

    if draft is not None and len(draft):
        line = base(NS_DRAFT, 0, Marker.LINE_STRIP)
        line.scale.x = 0.12
        line.color = ColorRGBA(r=1.0, g=0.5, b=0.0, a=0.9)
        line.points = [Point(x=0.0, y=0.0, z=0.08)] + [Point(x=float(x), y=float(y), z=0.08)
                                                       for x, y in np.asarray(draft, dtype=float)[:, :2]]
        out.markers.append(line)

    text = base(NS_TEXT, 0, Marker.TEXT_VIEW_FACING)
    text.pose.position.z = 3.0
    text.scale.z = 1.0
    text.color = ColorRGBA(r=1.0, g=1.0, b=1.0, a=1.0)
    text.text = ("FALLBACK STOP: " if fallback else "") + meta_text(meta)
    out.markers.append(text)
    return out
