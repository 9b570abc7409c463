"""Safe reading and writing of the user's files: size caps, confinement, keys, atomic writes."""
