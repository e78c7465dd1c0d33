from interest import compound


def test_one_year():
    assert compound(100, 0.1, 1) == 110.0


def test_two_years_compound():
    assert compound(100, 0.1, 2) == 121.0


def test_zero_years_is_the_principal():
    assert compound(100, 0.1, 0) == 100.0
