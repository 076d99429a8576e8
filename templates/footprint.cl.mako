## Shared helper of the core's kernels: where a point's kernel footprint
## starts.  Needs SUPPORT (the kernel width W in cells or planes) defined.

// First cell (or plane) of the footprint of a point at pos: ceil(pos - W/2).
inline double footprint_start(const double pos)
{
    return ceil(pos - 0.5 * SUPPORT);
}

// A cell index wrapped into [0, n) on a periodic axis of n cells.
inline int wrap_cell(const double cell, const int n)
{
    const int c = (int)cell % n;
    return c < 0 ? c + n : c;
}
