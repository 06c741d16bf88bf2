"""A shim, kept so that `python -m bench` from the top of a source checkout (or an unpacked
sdist) still runs the benchmark suite, which lives in the package: scopedgpu/bench/
(`scopedgpu bench`, `python -m scopedgpu bench`). Also here: dask-wheels.txt, the wheels
`python -m scopedgpu.bench.dask_scaling` needs on a host without network."""
