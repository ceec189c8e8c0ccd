"""Voxelizing a Ray Dataset of meshes (`pip install 'voxelizer[ray]'`): the public import
path of voxelizer.batch.ray, where the module's documentation is."""

from .batch.ray import (
    VoxelizeBatch,
    actor_options,
    result_of,
    to_dense,
    voxelize_dataset,
    voxelize_files_on_ray,
)

__all__ = [
    "VoxelizeBatch",
    "actor_options",
    "result_of",
    "to_dense",
    "voxelize_dataset",
    "voxelize_files_on_ray",
]
