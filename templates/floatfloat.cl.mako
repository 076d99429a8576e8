## Float-float ("double-single") arithmetic for devices without fp64: a value
## is the unevaluated sum hi + lo of two floats (|lo| <= ulp(hi) / 2), about
## 44 bits of mantissa, from error-free transformations that rely on
## correctly rounded float operations and fma (never build with
## -cl-fast-relaxed-math or -cl-unsafe-math-optimizations).  Values come
## from the host split into (hi, lo) pairs: clgrid.core.setpoints.float_float.
#ifndef CLGRID_FLOATFLOAT_CL
#define CLGRID_FLOATFLOAT_CL
typedef float2 ff_t;   // (hi, lo)

// a + b exactly, where |a| >= |b| or a == 0
inline ff_t ff_quick_two_sum(const float a, const float b)
{
    const float s = a + b;
    return (ff_t)(s, b - (s - a));
}

// a + b exactly (Knuth)
inline ff_t ff_two_sum(const float a, const float b)
{
    const float s = a + b;
    const float bb = s - a;
    return (ff_t)(s, (a - (s - bb)) + (b - bb));
}

inline ff_t ff_mul(const ff_t x, const ff_t y)
{
    const float p = x.x * y.x;
    const float e = fma(x.x, y.y, fma(x.y, y.x, fma(x.x, y.x, -p)));
    return ff_quick_two_sum(p, e);
}

inline ff_t ff_mul_f(const ff_t x, const float b)
{
    const float p = x.x * b;
    return ff_quick_two_sum(p, fma(x.y, b, fma(x.x, b, -p)));
}

inline ff_t ff_add_f(const ff_t x, const float b)
{
    const ff_t s = ff_two_sum(x.x, b);
    return ff_quick_two_sum(s.x, s.y + x.y);
}

inline ff_t ff_add(const ff_t x, const ff_t y)
{
    const ff_t s = ff_two_sum(x.x, y.x);
    const ff_t t = ff_two_sum(x.y, y.y);
    const ff_t r = ff_quick_two_sum(s.x, s.y + t.x);
    return ff_quick_two_sum(r.x, r.y + t.y);
}

// x / y, two float quotients
inline ff_t ff_div(const ff_t x, const ff_t y)
{
    const float q1 = x.x / y.x;
    const ff_t r = ff_add(x, -ff_mul_f(y, q1));
    return ff_quick_two_sum(q1, r.x / y.x);
}

// sqrt(x) for x >= 0: one Newton step from the float root (s^2 exact by fma)
inline ff_t ff_sqrt(const ff_t x)
{
    if (!(x.x > 0.0f))
        return (ff_t)(0.0f, 0.0f);
    const float s = sqrt(x.x);
    const float p = s * s;
    const float residual = ((x.x - p) - fma(s, s, -p)) + x.y;
    return ff_quick_two_sum(s, residual / (2.0f * s));
}

// x - rint(x) in [-1/2, 1/2] as a float: the fraction of a phase in turns,
// exact but for the last rounding (x.x - rint(x.x) is exact)
inline float ff_fraction(const ff_t x)
{
    return (x.x - rint(x.x)) + x.y;
}

// exp(2 pi i x) of a phase x in turns: only its fraction is taken in float,
// so phases of thousands of turns keep ~1e-7 radians
inline float2 ff_expi_turns(const ff_t x)
{
    float c;
    const float s = sincos(2.0f * M_PI_F * ff_fraction(x), &c);
    return (float2)(c, s);
}

// rint(hi + lo), as a float (exact below 2^24; x.x - rint(x.x) is exact)
inline float ff_rint(const ff_t x)
{
    const float r = rint(x.x);
    return r + rint((x.x - r) + x.y);
}
#endif
