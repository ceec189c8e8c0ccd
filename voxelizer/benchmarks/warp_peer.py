"""NVIDIA Warp as a peer of triangle grids (benchmarks/triangle_grid.py): its BVH build
(`wp.Mesh`) and first-hit queries (`wp.mesh_query_ray`) on a CUDA device. Imported only
where `import warp` works (a trimmed Warp 1.0.2 wheel on the GPU machine).

No `from __future__ import annotations` here: Warp reads the kernel's annotations as types."""

from typing import Any, Optional

import numpy as np
import warp as wp

wp.config.quiet = True
wp.init()


@wp.kernel
def first_hits(  # type: ignore[no-untyped-def]
    mesh: wp.uint64,
    origins: wp.array(dtype=wp.vec3),  # type: ignore[valid-type]
    directions: wp.array(dtype=wp.vec3),  # type: ignore[valid-type]
    hit_t: wp.array(dtype=float),  # type: ignore[valid-type]
    hit_face: wp.array(dtype=int),  # type: ignore[valid-type]
):
    i = wp.tid()
    # Warp's mutable locals, which mesh_query_ray writes (a literal would be a constant)
    t = float(0.0)  # noqa: UP018
    u = float(0.0)  # noqa: UP018
    v = float(0.0)  # noqa: UP018
    sign = float(0.0)  # noqa: UP018
    normal = wp.vec3()
    face = int(0)  # noqa: UP018, RUF046
    if wp.mesh_query_ray(mesh, origins[i], directions[i], 1.0e30, t, u, v, sign, normal, face):
        hit_t[i] = t
        hit_face[i] = face
    else:
        hit_t[i] = wp.inf
        hit_face[i] = -1


def version() -> str:
    return str(wp.config.version)


def cuda_device() -> Optional[str]:  # noqa: UP045 (annotations are evaluated here)
    return "cuda:0" if wp.is_cuda_available() else None


def upload(vertices: np.ndarray, faces: np.ndarray, device: str) -> tuple[Any, Any]:
    points = wp.array(np.asarray(vertices, np.float32), dtype=wp.vec3, device=device)
    indices = wp.array(np.asarray(faces, np.int32).reshape(-1), dtype=wp.int32, device=device)
    return points, indices


def build(points: Any, indices: Any, device: str) -> Any:
    """wp.Mesh of points and indices already on the device, waited for."""
    wp.synchronize_device(device)
    mesh = wp.Mesh(points=points, indices=indices)
    wp.synchronize_device(device)
    return mesh


def rays(origins: np.ndarray, directions: np.ndarray, device: str) -> tuple[Any, ...]:
    """The rays on the device, with room for their hits. Directions are normalized (Warp
    measures t in units of its direction; the hits' t is scaled back to the given ones)."""
    length = np.linalg.norm(directions, axis=1)
    count = len(origins)
    return (
        wp.array(np.asarray(origins, np.float32), dtype=wp.vec3, device=device),
        wp.array(
            np.asarray(directions / length[:, None], np.float32), dtype=wp.vec3, device=device
        ),
        wp.zeros(count, dtype=float, device=device),
        wp.zeros(count, dtype=int, device=device),
        length,
    )


def trace(mesh: Any, staged: tuple[Any, ...], device: str) -> tuple[np.ndarray, np.ndarray]:
    """First hits of the staged rays: (t in units of the given directions, face or -1)."""
    origins, directions, hit_t, hit_face, length = staged
    wp.synchronize_device(device)
    wp.launch(
        first_hits,
        dim=len(length),
        inputs=[mesh.id, origins, directions, hit_t, hit_face],
        device=device,
    )
    wp.synchronize_device(device)
    return hit_t.numpy() / length, hit_face.numpy().astype(np.int64)
