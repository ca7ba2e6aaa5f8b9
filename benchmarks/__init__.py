"""pynumabind benchmarks: bound vs unbound, and the cost of binding."""
