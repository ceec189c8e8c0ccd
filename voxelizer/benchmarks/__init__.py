"""The benchmarks. `python -m voxelizer.benchmarks` (__main__.py) times the matrix of meshes,
grids, variants and sorts with the CPU peers beside it; the other modules are its pieces
(meshes, peers, byte estimates, reports and plots, each testable on its own) and benchmarks
of their own, each run as `python -m voxelizer.benchmarks.NAME` (docs/benchmarks.md)."""
