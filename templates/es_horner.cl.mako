## Shared helper: the ES kernel's W taps by ducc0's per-tap polynomials
## (Horner's rule), for the GPU spread and the interpolation kernels.
## Parameters: real ("float" | "double"), support (int W), horner ((degree + 1)
## rows of W coefficients, highest power first: eskernel.horner_coefficients).
<%
    def literal(value):
        return ("%.9e" % value + "f") if real == "float" else "%.17e" % value
    def horner_expression(tap):
        variable = "x0" if tap == 0 else ("x1" if tap == support - 1 else "x")
        expression = literal(horner[0][tap])
        for row in horner[1:]:
            expression = "fma(%s, %s, %s)" % (expression, variable, literal(row[tap]))
        return expression
%>

// The W taps phi(t + a - W/2) of a point at offset t in [0, 1) past its
// footprint's first cell, by Horner's rule as spread_vector: each in its
// variable (eskernel.horner_variables): x = 2t - 1 inside, x0 = 2 sqrt(t) - 1
// for the first tap, x1 = 2 sqrt(1 - t) - 1 for the last.
inline void kernel_taps(const ${real} t, ${real} *taps)
{
    const ${real}2 roots = sqrt(fmax((${real}2)(t, (${real})1 - t), (${real})0));
    const ${real} x = fma(t, (${real})2, (${real})-1);
    const ${real} x0 = fma(roots.x, (${real})2, (${real})-1);
    const ${real} x1 = fma(roots.y, (${real})2, (${real})-1);
%   for tap in range(support):
    taps[${tap}] = ${horner_expression(tap)};
%   endfor
}

// Tap a alone of kernel_taps (the same operations, so the same value): the
// w weight of a point in one plane.
__constant ${real} HORNER_COEFFICIENTS[${len(horner)}][${support}] = {
%   for row in horner:
    {${", ".join(literal(value) for value in row)}},
%   endfor
};
inline ${real} kernel_tap(const ${real} t, const int a)
{
    const ${real} root = sqrt(fmax(a == 0 ? t : (${real})1 - t, (${real})0));
    const ${real} x = fma(a == 0 || a == ${support - 1} ? root : t, (${real})2, (${real})-1);
    ${real} value = HORNER_COEFFICIENTS[0][a];
    for (int row = 1; row < ${len(horner)}; ++row)
        value = fma(value, x, HORNER_COEFFICIENTS[row][a]);
    return value;
}
