"""Operations: the `memstrata` CLI, the quickstart, the demo and the benchmarks."""
