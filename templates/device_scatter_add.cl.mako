## Scatter-add: out[index[i]] += values[i] with the device's float atomics.
## The smallest real kernel of clgrid: the demo job and the atomics benchmark.
## Parameters: real ("float" | "double"), is_complex (bool),
##             items_per_work_item (int >= 1, consecutive items per work-item).
<%
    bits = 32 if real == "float" else 64
    suffix = ("c64" if bits == 32 else "c128") if is_complex else ("f%d" % bits)
    value_type = (real + "2") if is_complex else real
%>
<%include file="atomics.cl.mako"/>

__kernel void scatter_add(__global const unsigned int *index,
                          __global const ${value_type} *values,
                          volatile __global ${real} *out,
                          const unsigned int n_items)
{
    const size_t first = get_global_id(0) * ${items_per_work_item};
    for (size_t k = 0; k < ${items_per_work_item}; ++k) {
        const size_t i = first + k;
        if (i >= n_items)
            return;
% if is_complex:
        atomic_add_${suffix}(out + 2 * (size_t)index[i], values[i]);
% else:
        atomic_add_${suffix}(out + index[i], values[i]);
% endif
    }
}
