"""The finance demo's local market data: a fixed snapshot, so every answer is reproducible offline.

The figures are DEMO DATA for tests and offline demonstrations, rounded and frozen "as of" one date; they are not
quotes and must not be read as current market information.
"""

from __future__ import annotations

from dataclasses import dataclass

AS_OF = "2026-01-02"
CURRENCY = "USD"


@dataclass(frozen=True)
class Company:
    """One company's frozen figures (money in USD; shares and employees as counts)."""

    ticker: str
    name: str
    aliases: tuple[str, ...]
    sector: str
    industry: str
    headquarters: str
    founded: int
    employees: int
    price: float
    change_pct: float
    shares_outstanding: float
    eps: float
    book_value_per_share: float
    revenue: float
    net_income: float
    total_debt: float
    shareholders_equity: float

    @property
    def market_cap(self) -> float:
        return round(self.price * self.shares_outstanding, 2)


COMPANIES: dict[str, Company] = {
    c.ticker: c
    for c in (
        Company(
            "AAPL",
            "Apple Inc.",
            ("apple",),
            "Technology",
            "Consumer Electronics",
            "Cupertino, California",
            1976,
            161_000,
            195.20,
            0.84,
            15.2e9,
            6.40,
            4.30,
            391.0e9,
            97.0e9,
            108.0e9,
            74.0e9,
        ),
        Company(
            "MSFT",
            "Microsoft Corporation",
            ("microsoft",),
            "Technology",
            "Software",
            "Redmond, Washington",
            1975,
            228_000,
            425.50,
            -0.32,
            7.43e9,
            12.10,
            36.20,
            262.0e9,
            94.0e9,
            67.0e9,
            287.0e9,
        ),
        Company(
            "GOOGL",
            "Alphabet Inc.",
            ("alphabet", "google"),
            "Communication Services",
            "Internet Services",
            "Mountain View, California",
            1998,
            182_000,
            178.40,
            1.12,
            12.3e9,
            7.50,
            25.90,
            350.0e9,
            100.0e9,
            28.0e9,
            318.0e9,
        ),
        Company(
            "AMZN",
            "Amazon.com, Inc.",
            ("amazon",),
            "Consumer Discretionary",
            "E-commerce",
            "Seattle, Washington",
            1994,
            1_550_000,
            210.75,
            -0.58,
            10.5e9,
            5.50,
            28.10,
            620.0e9,
            58.0e9,
            135.0e9,
            295.0e9,
        ),
        Company(
            "NVDA",
            "NVIDIA Corporation",
            ("nvidia",),
            "Technology",
            "Semiconductors",
            "Santa Clara, California",
            1993,
            36_000,
            138.60,
            2.45,
            24.5e9,
            2.95,
            3.10,
            130.0e9,
            73.0e9,
            11.0e9,
            76.0e9,
        ),
        Company(
            "TSLA",
            "Tesla, Inc.",
            ("tesla",),
            "Consumer Discretionary",
            "Automobiles",
            "Austin, Texas",
            2003,
            125_000,
            248.90,
            -1.75,
            3.2e9,
            2.20,
            22.40,
            97.0e9,
            7.1e9,
            13.0e9,
            72.0e9,
        ),
        Company(
            "JPM",
            "JPMorgan Chase & Co.",
            ("jpmorgan", "jp morgan", "chase"),
            "Financials",
            "Banking",
            "New York, New York",
            1799,
            317_000,
            242.30,
            0.21,
            2.8e9,
            19.80,
            118.50,
            270.0e9,
            58.0e9,
            520.0e9,
            345.0e9,
        ),
        Company(
            "JNJ",
            "Johnson & Johnson",
            ("johnson & johnson", "johnson and johnson"),
            "Health Care",
            "Pharmaceuticals",
            "New Brunswick, New Jersey",
            1886,
            131_000,
            152.60,
            0.05,
            2.41e9,
            5.80,
            29.70,
            89.0e9,
            14.0e9,
            36.0e9,
            71.0e9,
        ),
    )
}
