"""Which origins and Host names the server lets in (the policy alone, no server needed)."""

from __future__ import annotations

from cascade_cli.server.policy import Policy


def test_allowed_origins_match_with_star_only() -> None:
    policy = Policy(("http://[fd00::5]:3000", "https://*.example.com"))
    assert policy.origin_allowed("http://[fd00::5]:3000")  # brackets are literal
    assert not policy.origin_allowed("http://f:3000")  # not a character class
    assert policy.origin_allowed("https://app.example.com")
    assert not policy.origin_allowed("https://example.org")
    assert policy.origin_allowed("http://localhost:5173")  # loopback pages always
    assert not Policy(("http://a?c.test",)).origin_allowed("http://abc.test")
