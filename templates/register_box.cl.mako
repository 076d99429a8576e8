## The register kernels' box (core_spread_register.cl.mako and
## core_interp_register.cl.mako): where a record puts each work-item's block.
## Needs BIN_U, BIN_V, OVERSAMPLE and TABLE_INDEX_MASK defined, and the
## Mako parameters block_u, block_v, separable and gcf_read (tables read as
## images: the record's sub-pixels and w plane instead of table offsets).

// Once per record, for every work-item of the stream: the box of bins that
// holds each block offset once (Romein's insight: a block's grid position
// changes only when the box slides past it), as its start box.x rounded
// down to a multiple of the bin and the offset box.y there, so that a block
// at offset o sits at box.x + o, plus a bin where o < box.y; the footprint
// start and the record's table offsets: (x0, y0, full slice, 0), or for
// separable tables (x0, y0, u row, v row), the rows of the record's phase
// x0 mod block_u (y0 mod block_v) in block vectors; tables read as images
// (x0, y0, fx | fy << 16, w plane).
inline void stage_record(const int4 record, __local int4 *where, __local int4 *box)
{
    const int y0 = record.x, x0 = record.y;
    const int index = record.z & TABLE_INDEX_MASK;
    const int box_u = x0 - x0 % ${block_u}, box_v = y0 - y0 % ${block_v};
    const int r_u = box_u % BIN_U, r_v = box_v % BIN_V;
    *box = (int4)(box_u - r_u, r_u, box_v - r_v, r_v);
% if gcf_read != "buffer":
    // sub-pixels below 2^16: the positions' steps are at most 2^15
    *where = (int4)(x0, y0, index % OVERSAMPLE | ((index / OVERSAMPLE) % OVERSAMPLE) << 16,
                    index / (OVERSAMPLE * OVERSAMPLE));
% elif separable:
    const int fx = index % OVERSAMPLE, fy = (index / OVERSAMPLE) % OVERSAMPLE;
    const int w_plane = index / (OVERSAMPLE * OVERSAMPLE);
    *where = (int4)(x0, y0,
                    ((w_plane * OVERSAMPLE + fx) * ${block_u} + x0 % ${block_u}) * (BIN_U / ${block_u}),
                    ((w_plane * OVERSAMPLE + fy) * ${block_v} + y0 % ${block_v}) * (BIN_V / ${block_v}));
% else:
    *where = (int4)(x0, y0, index, 0);
% endif
}

// Where the block at offset (offset_u, offset_v) of the box lies for a
// record staged with box (stage_record): the grid point of its first cell.
inline int2 block_position(const int4 box, const int offset_u, const int offset_v)
{
    return (int2)(box.x + offset_u + (offset_u < box.y ? BIN_U : 0),
                  box.z + offset_v + (offset_v < box.w ? BIN_V : 0));
}
