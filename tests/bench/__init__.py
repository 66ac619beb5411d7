"""The benchmarks (bench/): their arithmetic and corpora, and short runs against Triton."""
