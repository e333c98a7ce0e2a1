"""Writing releases: the release of a mechanism's output into a folder (:mod:`.release`), the sharded, resumable
run over every core or a Dask cluster (:mod:`.shards`), and the staged, journaled commit that no kill or race can
corrupt (:mod:`.staging`). What a release folder holds on disk is :mod:`privpix.data.formats.release_layout`.
"""
