"""Developers' tools that ship with the package but no user calls: `python -m
voxelizer.tools.build_spirv` rebuilds the SPIR-V in voxelizer/spirv/ after a shader changes."""
