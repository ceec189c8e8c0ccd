"""The GPU work of one voxelization, put together: the memory plan, the seven passes over
slabs of the grid, the SVO build on the device, and the merge of slab forests.

`Pipeline` (runner.py) is the one entry point: the API hands it a validated job and gets the
voxels (dense bits or SVO arrays) and typed stats back.
"""
