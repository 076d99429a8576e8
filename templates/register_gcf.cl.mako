## What the register kernels (core_spread_register.cl.mako and
## core_interp_register.cl.mako) share, written once: their helper includes
## and the reads of their tables.  The spread and its adjoint must take a
## record's weights from the same table entries in the same order, or
## degridding stops being gridding's exact transpose.  Imported, not
## included (<%namespace name="shared" file="register_gcf.cl.mako"/>): only
## the defs below, called where each kernel needs them, emit source.
## Uses the kernels' Mako parameters real, table_real, separable, gcf_read,
## image_planes, block_u and block_v (and those of the included helpers);
## the buffer reads take the phased separable tables
## (clgrid.core.register.phased_table) or the full (w_planes, O, O, S, S) one.
<%!
    def parts(table_real):
        """Reals a table weight holds: 1 (real table) or 2 (complex)."""
        return 1 if table_real else 2

    def vector_type(real, table_real, block):
        """OpenCL type of one block's weights along an axis of a separable
        phased table: a vector of block weights (a scalar for one real)."""
        n = block * parts(table_real)
        return real + (str(n) if n > 1 else "")

    def lane(name, block, a, table_real):
        """Weight a of the block vector `name` (vector_type): its component(s)."""
        n = parts(table_real)
        if block * n == 1:
            return name
        return name + ".s" + "".join("%x" % (a * n + c) for c in range(n))
%>

## The helper functions both register kernels include after their #defines:
## the box (register_box.cl.mako) and, for tables as images, the image reads
## (gcf_image.cl.mako) that the weights below call.
<%def name="helpers()">\
<%include file="register_box.cl.mako"/>
% if gcf_read != "buffer":
<%include file="gcf_image.cl.mako"/>
% endif
</%def>

## The kernel's table arguments, each line `pad` spaces in (the kernels'
## signatures align their arguments differently): two 1-D tables or one full
## one, as buffers or images.
<%def name="table_arguments(pad)">\
<%
    indent = " " * pad
    vec = real + "2"
    wu_type = vector_type(real, table_real, block_u)
    wv_type = vector_type(real, table_real, block_v)
%>\
% if gcf_read != "buffer" and separable:
${indent}read_only image2d_t gcf_u, read_only image2d_t gcf_v,
% elif gcf_read != "buffer":
${indent}read_only ${"image3d_t" if image_planes else "image2d_t"} gcf,
% elif separable:
${indent}__global const ${wu_type} *gcf_u, __global const ${wv_type} *gcf_v,
% else:
${indent}__global const ${vec} *gcf,
% endif
</%def>

## Tables as images: the block's first footprint cell (du, dv) relative to
## the record's footprint start, and the record's sub-pixels (fu, fv), from
## the record staged at `where` (register_box.cl.mako, stage_record) and the
## block's grid point (pu, pv).
<%def name="image_offsets()">\
                // the block's first footprint cell; the record's sub-pixels
                const int du = pu - where.x, dv = pv - where.y;
                const int fu = where.z & 0xffff, fv = where.z >> 16;
</%def>

## Separable tables as images: the block's block_u u weights wu and block_v
## v weights wv (after image_offsets).
<%def name="separable_image_weights()">\
                ${real if table_real else real + "2"} wu[${block_u}], wv[${block_v}];
% for a in range(block_u):
                wu[${a}] = gcf_image_weight(gcf_u, du + ${a}, fu, where.w);
% endfor
% for b in range(block_v):
                wv[${b}] = gcf_image_weight(gcf_v, dv + ${b}, fv, where.w);
% endfor
</%def>

## Separable phased buffers: the block's place in the box, in blocks, picks
## one aligned vector of weights per axis (no edge tests: the tables are
## padded), split into wu and wv (wu only, without v_weights: the spread's
## row products staged for the group, staged_rows).
<%def name="separable_buffer_weights(v_weights=True)">\
<%
    wu_type = vector_type(real, table_real, block_u)
%>\
                // the block's place in the box, in blocks: its weights' vector
                const ${wu_type} wu_vector =
                    gcf_u[where.z + (int)((unsigned int)(pu - box.x - box.y) / ${block_u}u)];
                ${real if table_real else real + "2"} wu[${block_u}];
% for a in range(block_u):
                wu[${a}] = ${lane("wu_vector", block_u, a, table_real)};
% endfor
% if v_weights:
                ${v_weight_vector("wv_vector", "pv")}
                ${real if table_real else real + "2"} wv[${block_v}];
%   for b in range(block_v):
                wv[${b}] = ${lane("wv_vector", block_v, b, table_real)};
%   endfor
% endif
</%def>

## Separable phased buffers: the v weights' vector `name` of the block at
## grid row `pv` of the record staged as `where`, `box` (block_position),
## where separable_buffer_weights and the spread's staged row products
## (staged_rows) read it.
<%def name="v_weight_vector(name, pv)">\
const ${vector_type(real, table_real, block_v)} ${name} =
                    gcf_v[where.w + (int)((unsigned int)(${pv} - box.z - box.w) / ${block_v}u)];\
</%def>

## Full tables as buffers: the record's S x S slice between zero pads of a
## block less one (clgrid.core.register.padded_slices: a box's blocks start
## up to a block less one before the footprint and end within the box), as
## `slice` at the block's first footprint cell (du, dv): a block partly off
## the footprint reads zeros, so neither kernel tests bounds, and weight
## (a, b) of the block is slice[b * slice_cols() + a].
<%def name="slice_cols()">${bin_u + 2 * (block_u - 1)}</%def>
<%def name="full_slice()">\
                const int du = pu - where.x;   // footprint column of the block's first point
                const int dv = pv - where.y;
                __global const ${real}2 *slice = gcf
                    + (size_t)where.z * ${(bin_v + 2 * (block_v - 1)) * (bin_u + 2 * (block_u - 1))}
                    + (dv + ${block_v - 1}) * ${slice_cols()} + du + ${block_u - 1};
</%def>
