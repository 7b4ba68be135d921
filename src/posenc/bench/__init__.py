"""Performance benchmarks: time and peak memory against the floor and the peers' way."""
