"""The four finance tools: deterministic functions over the local snapshot, plus their OpenAI tool schemas.

Every tool returns a JSON object; bad input returns ``{"error": ...}`` (the agent reports it) instead of raising, so a
model's malformed call is visible in the trace rather than crashing the turn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from white_agent.finance.data import AS_OF, COMPANIES, CURRENCY, Company

COMPOUNDING = {"annual": 1, "annually": 1, "yearly": 1, "semiannual": 2, "quarterly": 4, "monthly": 12, "daily": 365}


def _company(ticker: Any) -> Company | dict[str, Any]:
    if not isinstance(ticker, str) or not ticker.strip():
        return {"error": "ticker must be a non-empty string"}
    company = COMPANIES.get(ticker.strip().upper())
    if company is None:
        return {"error": f"unknown ticker {ticker.strip().upper()!r}; known: {', '.join(sorted(COMPANIES))}"}
    return company


def get_stock_price(ticker: str) -> dict[str, Any]:
    """Last price of ``ticker`` in the snapshot."""
    company = _company(ticker)
    if isinstance(company, dict):
        return company
    return {
        "ticker": company.ticker,
        "price": company.price,
        "currency": CURRENCY,
        "change_pct": company.change_pct,
        "as_of": AS_OF,
    }


def get_company_info(ticker: str) -> dict[str, Any]:
    """Name, sector, industry, headquarters, founding year, employees and market capitalisation."""
    company = _company(ticker)
    if isinstance(company, dict):
        return company
    return {
        "ticker": company.ticker,
        "name": company.name,
        "sector": company.sector,
        "industry": company.industry,
        "headquarters": company.headquarters,
        "founded": company.founded,
        "employees": company.employees,
        "market_cap": company.market_cap,
        "currency": CURRENCY,
    }


def calculate_financial_ratios(ticker: str) -> dict[str, Any]:
    """P/E, price-to-book, net margin (%), debt-to-equity and return on equity (%) from the snapshot."""
    company = _company(ticker)
    if isinstance(company, dict):
        return company
    return {
        "ticker": company.ticker,
        "pe_ratio": round(company.price / company.eps, 2),
        "price_to_book": round(company.price / company.book_value_per_share, 2),
        "net_margin_pct": round(100 * company.net_income / company.revenue, 2),
        "debt_to_equity": round(company.total_debt / company.shareholders_equity, 2),
        "return_on_equity_pct": round(100 * company.net_income / company.shareholders_equity, 2),
    }


def _number(name: str, value: Any, *, positive: bool = False) -> float | str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"{name} must be a number"
    if positive and value <= 0:
        return f"{name} must be > 0"
    if value < 0:
        return f"{name} must be >= 0"
    return float(value)


def calculate_investment_returns(
    principal: float, annual_rate: float, years: float, compounding: str = "annual"
) -> dict[str, Any]:
    """Compound growth of ``principal`` at ``annual_rate`` percent per year for ``years`` years."""
    p = _number("principal", principal, positive=True)
    r = _number("annual_rate", annual_rate)
    t = _number("years", years)
    for value in (p, r, t):
        if isinstance(value, str):
            return {"error": value}
    assert isinstance(p, float) and isinstance(r, float) and isinstance(t, float)
    periods = COMPOUNDING.get(str(compounding).strip().lower()) if isinstance(compounding, str) else None
    if periods is None:
        return {"error": f"compounding must be one of {', '.join(sorted(set(COMPOUNDING)))}"}
    final = p * (1 + r / 100 / periods) ** (periods * t)
    return {
        "principal": round(p, 2),
        "annual_rate": r,
        "years": t,
        "compounding": str(compounding).strip().lower(),
        "final_value": round(final, 2),
        "total_return": round(final - p, 2),
        "total_return_pct": round(100 * (final - p) / p, 2),
    }


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "get_stock_price": get_stock_price,
    "get_company_info": get_company_info,
    "calculate_financial_ratios": calculate_financial_ratios,
    "calculate_investment_returns": calculate_investment_returns,
}

_TICKER = {"ticker": {"type": "string", "description": "Stock ticker symbol, e.g. AAPL"}}
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_stock_price",
            "description": "Latest stock price of a company (local demo data).",
            "parameters": {"type": "object", "properties": _TICKER, "required": ["ticker"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_company_info",
            "description": (
                "Company profile: name, sector, industry, headquarters, founding year, employees, market cap."
            ),
            "parameters": {"type": "object", "properties": _TICKER, "required": ["ticker"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculate_financial_ratios",
            "description": "P/E, price-to-book, net margin %, debt-to-equity and return on equity % of a company.",
            "parameters": {"type": "object", "properties": _TICKER, "required": ["ticker"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "calculate_investment_returns",
            "description": "Compound growth of an investment.",
            "parameters": {
                "type": "object",
                "properties": {
                    "principal": {"type": "number", "description": "amount invested"},
                    "annual_rate": {"type": "number", "description": "yearly rate in percent, e.g. 7 for 7%"},
                    "years": {"type": "number"},
                    "compounding": {"type": "string", "enum": ["annual", "quarterly", "monthly", "daily"]},
                },
                "required": ["principal", "annual_rate", "years"],
            },
        },
    },
]


def execute_tool(name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """Run one tool by name; unknown tools and bad arguments give ``{"error": ...}``."""
    tool = TOOLS.get(name)
    if tool is None:
        return {"error": f"unknown tool {name!r}; tools: {', '.join(TOOLS)}"}
    try:
        return tool(**dict(arguments))
    except TypeError as error:
        return {"error": f"bad arguments for {name}: {error}"}
