"""The job shapes behind one interface (``shape.JobShape``): a single pod, a gang, a
CompositePodGroup's heterogeneous job. The lifecycle and the membership call the interface; each
shape imports neither."""
