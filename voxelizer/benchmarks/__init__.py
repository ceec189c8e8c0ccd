"""Pieces of the benchmark (`python -m voxelizer.bench`): meshes, peers, byte estimates,
reports and plots, each in its own module so that they can be tested on their own."""
