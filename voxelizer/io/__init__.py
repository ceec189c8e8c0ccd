"""Files: mesh loading, result writers and readers, the preview image.

The data model (grid, svo, placement) never touches a file; everything that does is here.
"""
