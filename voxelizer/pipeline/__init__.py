"""The GPU work of one voxelization, put together: the memory plan, the passes over slabs of
the grid, the fill modes, the SVO build on the device, and the merge of slab forests.

`Pipeline` (runner.py) is the one entry point: the API hands it a validated `Job` (job.py)
and gets the voxels (dense bits or SVO arrays) and typed stats back. The job's fill mode
picks its strategy from one registry (fills/: FILLS); every strategy runs its slabs through
one loop (slabs.py), and the slabs' parts through the passes (passes.py: binning.py,
fill_pass.py, surface_pass.py). docs/developers/architecture.md draws the whole.
"""
