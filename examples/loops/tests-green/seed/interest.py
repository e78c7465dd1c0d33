def compound(principal, rate, years):
    """Principal grown at `rate` per year, compounded yearly, rounded to cents."""
    return round(principal * (1 + rate) * years, 2)
