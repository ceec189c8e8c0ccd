"""Many meshes: voxelize_many (engine) and the records it plans and gives (tasks), one worker
(worker), several workers in processes (pool), mesh files read in helper processes
(readers), the command's batch mode (cli) and Ray Datasets (ray, the public
voxelizer.ray). Nothing is imported here: the command line imports `cli` for its options
without the batch machinery, and `voxelizer.voxelize_many` imports the engine on first use."""
