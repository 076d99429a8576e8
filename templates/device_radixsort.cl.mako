## Stable least-significant-digit radix sort of (key, index) pairs, 8 bits a pass.
## Each pass: `histogram` counts digits per tile of the input (one work-group
## per tile), an exclusive scan over the digit-major table [digit][tile]
## (`scan_counts`, one work-group) gives every (digit, tile) its first output slot, and
## `scatter` moves the tile's items there in input order.  Within a block of
## GROUP items an item's rank among equal digits is counted from local
## memory, so the order is stable and deterministic (no atomics decide it).
## Keys are mapped to min(key - base, span) before the digits are taken:
## callers sort a compact range and send keys above it (sentinels) last.
## Parameters: key_type ("uint" | "ulong"), group_size (work-items a group).

typedef ${key_type} key_t;

#define RADIX 256
#define GROUP ${group_size}

inline uint digit_of(const key_t key, const key_t base, const key_t span, const uint shift)
{
    const key_t offset = key - base;  // keys below base never occur
    const key_t clamped = (offset < span) ? offset : span;
    return (uint)((clamped >> shift) & (key_t)(RADIX - 1));
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void histogram(__global const key_t *keys, const ulong n, const ulong tile_size,
               const key_t base, const key_t span, const uint shift,
               __global uint *counts)  // [RADIX][n_tiles]
{
% if group_size == 1:
    // one work-item a tile (CPUs): a plain serial count, no local atomics
    uint local_counts[RADIX];
% else:
    __local uint local_counts[RADIX];
% endif
    const uint lid = get_local_id(0);
    const ulong tile = get_group_id(0);
    const ulong n_tiles = get_num_groups(0);
    for (uint d = lid; d < RADIX; d += GROUP)
        local_counts[d] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const ulong begin = tile * tile_size;
    const ulong end = min(n, begin + tile_size);
% if group_size == 1:
    for (ulong i = begin; i < end; ++i)
        ++local_counts[digit_of(keys[i], base, span, shift)];
% else:
    for (ulong i = begin + lid; i < end; i += GROUP)
        atomic_inc(&local_counts[digit_of(keys[i], base, span, shift)]);
    barrier(CLK_LOCAL_MEM_FENCE);
% endif
    for (uint d = lid; d < RADIX; d += GROUP)
        counts[d * n_tiles + tile] = local_counts[d];
}

// Exclusive prefix sum of `n` counts by one work-group: each work-item sums
// a contiguous segment, the segment totals are scanned in local memory
// (Hillis-Steele), then each work-item writes its segment's offsets.
__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void scan_counts(__global const uint *counts, const uint n, __global uint *offsets)
{
    __local uint totals[GROUP];
    const uint lid = get_local_id(0);
    const uint segment = (n + GROUP - 1) / GROUP;
    const uint begin = min(n, lid * segment);
    const uint end = min(n, begin + segment);
    uint total = 0;
    for (uint i = begin; i < end; ++i)
        total += counts[i];
    totals[lid] = total;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint stride = 1; stride < GROUP; stride *= 2) {
        const uint add = (lid >= stride) ? totals[lid - stride] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        totals[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    uint running = totals[lid] - total;  // exclusive: the segments before mine
    for (uint i = begin; i < end; ++i) {
        const uint count = counts[i];
        offsets[i] = running;
        running += count;
    }
}

__kernel __attribute__((reqd_work_group_size(GROUP, 1, 1)))
void scatter(__global const key_t *keys_in, __global const uint *values_in,
             const ulong n, const ulong tile_size,
             const key_t base, const key_t span, const uint shift,
             __global const uint *offsets,  // exclusive scan of histogram's counts
             const uint first_pass,         // values are the input positions
             __global key_t *keys_out, __global uint *values_out)
{
% if group_size == 1:
    // one work-item a tile (CPUs): the tile's items in order, each to its
    // digit's cursor (stable by construction)
    uint cursor[RADIX];
    const ulong tile = get_group_id(0);
    const ulong n_tiles = get_num_groups(0);
    for (uint d = 0; d < RADIX; ++d)
        cursor[d] = offsets[d * n_tiles + tile];
    const ulong begin = tile * tile_size;
    const ulong end = min(n, begin + tile_size);
    for (ulong i = begin; i < end; ++i) {
        const key_t key = keys_in[i];
        const uint slot = cursor[digit_of(key, base, span, shift)]++;
        keys_out[slot] = key;
        values_out[slot] = first_pass ? (uint)i : values_in[i];
    }
% else:
    __local uint cursor[RADIX];
    __local ushort digits[GROUP];
    const uint lid = get_local_id(0);
    const ulong tile = get_group_id(0);
    const ulong n_tiles = get_num_groups(0);
    for (uint d = lid; d < RADIX; d += GROUP)
        cursor[d] = offsets[d * n_tiles + tile];
    const ulong begin = tile * tile_size;
    const ulong end = min(n, begin + tile_size);
    for (ulong block = begin; block < end; block += GROUP) {  // uniform over the group
        const ulong i = block + lid;
        const bool mine = i < end;
        key_t key = 0;
        uint value = 0;
        uint digit = RADIX;  // no item: matches no real digit
        if (mine) {
            key = keys_in[i];
            value = first_pass ? (uint)i : values_in[i];
            digit = digit_of(key, base, span, shift);
        }
        digits[lid] = (ushort)digit;
        barrier(CLK_LOCAL_MEM_FENCE);
        uint before = 0;
        for (uint j = 0; j < lid; ++j)
            before += (digits[j] == digit);
        bool last = true;
        for (uint j = lid + 1; j < GROUP; ++j)
            last = last && (digits[j] != digit);
        if (mine) {
            const uint slot = cursor[digit] + before;
            keys_out[slot] = key;
            values_out[slot] = value;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (mine && last)  // one writer per digit: the block's last item of it
            cursor[digit] += before + 1;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
% endif
}
