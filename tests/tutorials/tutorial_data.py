"""Input files for the hopsworks-tutorials pipelines, made here instead of downloaded.

Each generator writes the files one pipeline reads, with the columns its notebooks and helper modules use and
the shape of the real files where it matters to the feature store: the same key columns, keys that repeat where
the real tables repeat them (a bureau's monthly balances, a card's transactions), missing values at about the
rates that decide which columns the notebooks drop, and blank strings where the real CSV has them. The numbers
are drawn from a seeded generator, so two runs write the same bytes; they are plausible, not real.

`GENERATORS` maps a pipeline's name to a function `(folder, rng) -> {name in the notebook's URL: file}`.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

Files = dict[str, Path]


def _pick(rng: np.random.Generator, values: list, n: int, weights: list[float] | None = None) -> np.ndarray:
    p = None if weights is None else np.asarray(weights, dtype=float) / sum(weights)
    return rng.choice(np.asarray(values, dtype=object), size=n, p=p)


def _with_missing(rng: np.random.Generator, values: np.ndarray, rate: float) -> np.ndarray:
    """`values` as floats (or objects) with about `rate` of them missing."""
    out = values.astype(object if values.dtype == object else float)
    out[rng.random(len(out)) < rate] = None if values.dtype == object else np.nan
    return out


# --- churn: a telecom's customers, three files of one row per customer ---------------------------------------

def churn(folder: Path, rng: np.random.Generator, customers: int = 3000) -> Files:
    letters = np.array(list(string.ascii_uppercase))
    ids = [f"{rng.integers(1000, 9999)}-{''.join(rng.choice(letters, 5))}" for _ in range(customers)]
    ids = list(dict.fromkeys(ids))          # ids are unique in the real files
    n = len(ids)
    recorded = pd.Timestamp("2023-01-01") + pd.to_timedelta(rng.integers(0, 365 * 24, n), unit="h")

    demography = pd.DataFrame({
        "customerID": ids,
        "gender": _pick(rng, ["Female", "Male"], n),
        "SeniorCitizen": (rng.random(n) < 0.16).astype(int),
        "Dependents": _pick(rng, ["No", "Yes"], n, [0.7, 0.3]),
        "Partner": _pick(rng, ["No", "Yes"], n, [0.52, 0.48]),
    })

    internet = _pick(rng, ["DSL", "Fiber optic", "No"], n, [0.34, 0.44, 0.22])
    phone = _pick(rng, ["Yes", "No"], n, [0.9, 0.1])

    def addon(rate: float) -> np.ndarray:
        chosen = np.where(rng.random(n) < rate, "Yes", "No").astype(object)
        chosen[internet == "No"] = "No internet service"
        return chosen

    lines = np.where(rng.random(n) < 0.47, "Yes", "No").astype(object)
    lines[phone == "No"] = "No phone service"
    subscriptions = pd.DataFrame({
        "customerID": ids,
        "DeviceProtection": addon(0.34), "OnlineBackup": addon(0.34), "OnlineSecurity": addon(0.29),
        "InternetService": internet, "MultipleLines": lines, "PhoneService": phone,
        "TechSupport": addon(0.29), "StreamingMovies": addon(0.39), "StreamingTV": addon(0.38),
        "datetime": recorded,
    })

    contract = _pick(rng, ["Month-to-month", "One year", "Two year"], n, [0.55, 0.21, 0.24])
    tenure = rng.integers(1, 73, n)
    tenure[rng.random(n) < 0.0016] = 0      # new customers: their total charges are blank in the real file
    monthly = np.round(18.25 + 100.5 * rng.beta(1.2, 1.1, n) + np.where(internet == "Fiber optic", 15, 0), 2)
    monthly = np.minimum(monthly, 118.75)
    total = np.round(monthly * tenure * rng.uniform(0.9, 1.05, n), 2)
    total_text = np.where(tenure == 0, " ", total.astype(str))
    churn_odds = (0.05 + 0.35 * (contract == "Month-to-month") + 0.12 * (internet == "Fiber optic")
                  - 0.004 * tenure)
    churned = np.where(rng.random(n) < np.clip(churn_odds, 0.02, 0.9), "Yes", "No")
    customer_info = pd.DataFrame({
        "customerID": ids, "Contract": contract, "tenure": tenure,
        "PaymentMethod": _pick(rng, ["Electronic check", "Mailed check", "Bank transfer (automatic)",
                                     "Credit card (automatic)"], n, [0.34, 0.23, 0.22, 0.21]),
        "PaperlessBilling": _pick(rng, ["Yes", "No"], n, [0.59, 0.41]),
        "MonthlyCharges": monthly, "TotalCharges": total_text, "Churn": churned, "datetime": recorded,
    })

    folder.mkdir(parents=True, exist_ok=True)
    files = {"demography.csv": demography, "customer_info.csv": customer_info, "subscriptions.csv": subscriptions}
    for name, frame in files.items():
        frame.to_csv(folder / name, index=False)
    return {name: folder / name for name in files}


# --- credit_scores: the Home Credit tables, lower-cased, with a `datetime` where the tutorial has one ----------

def credit_scores(folder: Path, rng: np.random.Generator, applicants: int = 3000) -> Files:
    ids = np.arange(100002, 100002 + applicants)
    base = pd.Timestamp("2018-01-01")
    app_time = base + pd.to_timedelta(rng.integers(0, 365 * 3, applicants), unit="D")
    n = applicants
    income = np.round(rng.lognormal(11.9, 0.5, n), 1)
    credit = np.round(rng.lognormal(13.0, 0.6, n), 1)
    # five family statuses and five education levels, each level with both targets: the notebook's plots
    # give explode= and add_perc() one entry per level the real (cleaned) file has
    family = _pick(rng, ["Married", "Single / not married", "Civil marriage", "Separated", "Widow"],
                   n, [0.64, 0.15, 0.1, 0.06, 0.05])
    # The tutorial's applications.csv comes cleaned: its remove_nans() (columns with 20% or more missing go, then
    # rows with any missing value) keeps every applicant the other tables name, else the training query's bureau
    # rows would find no application and no label. So columns missing less than that here have nothing missing.
    apps = {
        "sk_id_curr": ids,
        "target": (rng.random(n) < 0.08).astype(int),
        "name_contract_type": _pick(rng, ["Cash loans", "Revolving loans"], n, [0.9, 0.1]),
        "code_gender": _pick(rng, ["F", "M"], n, [0.66, 0.34]),
        "flag_own_car": _pick(rng, ["N", "Y"], n, [0.66, 0.34]),
        "flag_own_realty": _pick(rng, ["Y", "N"], n, [0.69, 0.31]),
        "cnt_children": rng.choice([0, 1, 2, 3], n, p=[0.7, 0.2, 0.08, 0.02]),
        "amt_income_total": income,
        "amt_credit": credit,
        "amt_annuity": _with_missing(rng, np.round(credit / rng.uniform(15, 40, n), 1), 0.0),
        "amt_goods_price": _with_missing(rng, np.round(credit * 0.9, 1), 0.0),
        "name_type_suite": _with_missing(rng, _pick(rng, ["Unaccompanied", "Family", "Spouse, partner", "Children",
                                                          "Other_B", "Other_A", "Group of people"], n,
                                                    [0.81, 0.13, 0.037, 0.011, 0.006, 0.003, 0.001]), 0.0),
        "name_income_type": _pick(rng, ["Working", "Commercial associate", "Pensioner", "State servant",
                                        "Unemployed"], n, [0.52, 0.23, 0.18, 0.07, 0.001]),
        "name_education_type": _pick(rng, ["Secondary / secondary special", "Higher education",
                                           "Incomplete higher", "Lower secondary", "Academic degree"], n,
                                     [0.69, 0.24, 0.035, 0.015, 0.02]),
        "name_family_status": family,
        "name_housing_type": _pick(rng, ["House / apartment", "With parents", "Municipal apartment",
                                         "Rented apartment", "Office apartment"], n, [0.89, 0.05, 0.03, 0.02, 0.01]),
        "region_population_relative": np.round(rng.uniform(0.001, 0.072, n), 6),
        "days_birth": -rng.integers(7500, 25200, n),
        "days_employed": -rng.integers(0, 15000, n),
        "days_registration": -np.round(rng.uniform(0, 20000, n), 1),
        "days_id_publish": -rng.integers(0, 7000, n),
        "own_car_age": _with_missing(rng, rng.integers(0, 40, n).astype(float), 0.66),
        "flag_mobil": np.ones(n, dtype=int),
        "flag_emp_phone": (rng.random(n) < 0.82).astype(int),
        "flag_work_phone": (rng.random(n) < 0.2).astype(int),
        "flag_phone": (rng.random(n) < 0.28).astype(int),
        "flag_email": (rng.random(n) < 0.06).astype(int),
        "occupation_type": _with_missing(rng, _pick(rng, ["Laborers", "Sales staff", "Core staff", "Managers",
                                                          "Drivers"], n), 0.31),
        "cnt_fam_members": _with_missing(rng, rng.integers(1, 6, n).astype(float), 0.0),
        "region_rating_client": rng.choice([1, 2, 3], n, p=[0.1, 0.74, 0.16]),
        "weekday_appr_process_start": _pick(rng, ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY",
                                                  "SATURDAY", "SUNDAY"], n),
        "hour_appr_process_start": rng.integers(0, 24, n),
        "organization_type": _pick(rng, ["Business Entity Type 3", "XNA", "Self-employed", "Other", "Medicine"], n),
        "ext_source_1": _with_missing(rng, np.round(rng.uniform(0.01, 0.96, n), 6), 0.56),
        "ext_source_2": _with_missing(rng, np.round(rng.uniform(0.0, 0.85, n), 6), 0.0),
        "ext_source_3": _with_missing(rng, np.round(rng.uniform(0.0, 0.9, n), 6), 0.0),
        "apartments_avg": _with_missing(rng, np.round(rng.uniform(0, 1, n), 4), 0.5),
        "obs_30_cnt_social_circle": _with_missing(rng, rng.poisson(1.4, n).astype(float), 0.0),
        "def_30_cnt_social_circle": _with_missing(rng, rng.poisson(0.15, n).astype(float), 0.0),
        "days_last_phone_change": -rng.integers(0, 4000, n).astype(float),
    }
    for number in range(2, 22):
        apps[f"flag_document_{number}"] = (rng.random(n) < (0.7 if number == 3 else 0.01)).astype(int)
    apps["amt_req_credit_bureau_year"] = _with_missing(rng, rng.poisson(1.9, n).astype(float), 0.0)
    apps["datetime"] = app_time
    applications = pd.DataFrame(apps)

    # Credit bureau: 0-8 earlier credits per applicant, each with its monthly balance history (keys repeat).
    per_app = rng.choice(range(9), n, p=[0.14, 0.14, 0.14, 0.13, 0.12, 0.1, 0.09, 0.08, 0.06])
    # the newest applicant has bureau records: the feature pipeline numbers its new applications and new bureau
    # records from each table's highest sk_id_curr, which then name the same applicants
    per_app[-1] = max(per_app[-1], 1)
    b_curr = np.repeat(ids, per_app)
    # recorded after the application they belong to: the training query joins bureaus (left, with the label's
    # time) to applications point in time, and an application recorded later would leave the label empty
    b_time = np.repeat(app_time, per_app) + pd.to_timedelta(rng.integers(0, 2000, len(b_curr)), unit="D")
    m = len(b_curr)
    b_ids = 5714462 + rng.permutation(m * 3)[:m]
    credit_sum = np.round(rng.lognormal(11.8, 1.2, m), 1)
    bureaus = pd.DataFrame({
        "sk_id_curr": b_curr, "sk_id_bureau": b_ids,
        "credit_active": _pick(rng, ["Closed", "Active", "Sold", "Bad debt"], m, [0.63, 0.36, 0.009, 0.001]),
        "credit_currency": _pick(rng, ["currency 1", "currency 2", "currency 3"], m, [0.998, 0.0015, 0.0005]),
        "days_credit": -rng.integers(0, 2922, m),
        "credit_day_overdue": np.where(rng.random(m) < 0.997, 0, rng.integers(1, 2000, m)),
        "days_credit_enddate": _with_missing(rng, rng.integers(-3000, 30000, m).astype(float), 0.06),
        "days_enddate_fact": _with_missing(rng, -rng.integers(0, 2900, m).astype(float), 0.37),
        "amt_credit_max_overdue": _with_missing(rng, np.round(rng.exponential(3000, m), 1), 0.65),
        "cnt_credit_prolong": np.where(rng.random(m) < 0.995, 0, rng.integers(1, 5, m)),
        "amt_credit_sum": credit_sum,
        "amt_credit_sum_debt": _with_missing(rng, np.round(credit_sum * rng.uniform(0, 0.8, m), 1), 0.15),
        "amt_credit_sum_limit": _with_missing(rng, np.round(rng.exponential(5000, m), 1), 0.34),
        "amt_credit_sum_overdue": np.zeros(m),
        "credit_type": _pick(rng, ["Consumer credit", "Credit card", "Car loan", "Mortgage", "Microloan"], m,
                             [0.73, 0.23, 0.017, 0.011, 0.012]),
        "days_credit_update": -rng.integers(0, 2900, m),
        "amt_annuity": _with_missing(rng, np.round(rng.exponential(15000, m), 1), 0.71),
        "datetime": b_time,
    })
    # bureau_balance.csv is grouped by bureau id, newest month first: the first rows hold a few hundred bureaus.
    months = rng.integers(1, 40, m)
    bb_ids = np.repeat(np.sort(b_ids), months)
    bureau_balances = pd.DataFrame({
        "sk_id_bureau": bb_ids,
        "months_balance": -np.concatenate([np.arange(k) for k in months]),
        "status": _pick(rng, ["C", "0", "X", "1", "2", "5"], len(bb_ids), [0.5, 0.28, 0.2, 0.015, 0.003, 0.002]),
    })

    # Previous applications at Home Credit: 0-6 per applicant, with their POS/cash, card and instalment months.
    per_app = rng.choice(range(7), n, p=[0.05, 0.2, 0.2, 0.2, 0.15, 0.1, 0.1])
    p_curr = np.repeat(ids, per_app)
    k = len(p_curr)
    p_ids = 1000000 + rng.permutation(k * 3)[:k]
    p_time = np.repeat(app_time, per_app) - pd.to_timedelta(rng.integers(1, 2900, k), unit="D")
    p_credit = np.round(rng.lognormal(11.5, 1.0, k), 1)
    previous_applications = pd.DataFrame({
        "sk_id_prev": p_ids, "sk_id_curr": p_curr,
        "name_contract_type": _pick(rng, ["Cash loans", "Consumer loans", "Revolving loans"], k, [0.45, 0.44, 0.11]),
        "amt_annuity": _with_missing(rng, np.round(p_credit / rng.uniform(6, 36, k), 1), 0.22),
        "amt_application": np.round(p_credit * rng.uniform(0.8, 1.1, k), 1),
        "amt_credit": p_credit,
        "amt_down_payment": _with_missing(rng, np.round(rng.exponential(6000, k), 1), 0.53),
        "amt_goods_price": _with_missing(rng, np.round(p_credit * 0.95, 1), 0.23),
        "weekday_appr_process_start": _pick(rng, ["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY",
                                                  "SATURDAY", "SUNDAY"], k),
        "hour_appr_process_start": rng.integers(0, 24, k),
        "flag_last_appl_per_contract": _pick(rng, ["Y", "N"], k, [0.995, 0.005]),
        "name_cash_loan_purpose": _pick(rng, ["XAP", "XNA", "Repairs", "Other"], k, [0.55, 0.41, 0.02, 0.02]),
        "name_contract_status": _pick(rng, ["Approved", "Canceled", "Refused", "Unused offer"], k,
                                      [0.62, 0.19, 0.17, 0.02]),
        "days_decision": -rng.integers(1, 2922, k),
        "name_payment_type": _pick(rng, ["Cash through the bank", "XNA", "Non-cash from your account"], k,
                                   [0.62, 0.37, 0.01]),
        "code_reject_reason": _pick(rng, ["XAP", "HC", "LIMIT", "SCO"], k, [0.81, 0.1, 0.05, 0.04]),
        "name_type_suite": _with_missing(rng, _pick(rng, ["Unaccompanied", "Family", "Spouse, partner"], k), 0.49),
        "name_client_type": _pick(rng, ["Repeater", "New", "Refreshed"], k, [0.74, 0.18, 0.08]),
        "name_goods_category": _pick(rng, ["XNA", "Mobile", "Consumer Electronics", "Computers"], k),
        "name_portfolio": _pick(rng, ["POS", "Cash", "XNA", "Cards"], k, [0.41, 0.28, 0.22, 0.09]),
        "channel_type": _pick(rng, ["Credit and cash offices", "Country-wide", "Stone", "Regional / Local"], k),
        "cnt_payment": _with_missing(rng, rng.choice([6, 12, 18, 24, 36], k).astype(float), 0.18),
        "name_yield_group": _pick(rng, ["XNA", "middle", "high", "low_normal"], k),
        "days_first_drawing": _with_missing(rng, rng.integers(-2900, 365243, k).astype(float), 0.4),
        "rate_down_payment": _with_missing(rng, np.round(rng.uniform(0, 0.3, k), 6), 0.53),
        "datetime": p_time,
    })

    def monthly(prev_ids: np.ndarray, curr_ids: np.ndarray, longest: int) -> tuple[np.ndarray, ...]:
        lengths = rng.integers(1, longest, len(prev_ids))
        return (np.repeat(prev_ids, lengths), np.repeat(curr_ids, lengths),
                -np.concatenate([np.arange(1, length + 1) for length in lengths]))

    pos_prev, pos_curr, pos_month = monthly(p_ids, p_curr, 14)
    q = len(pos_prev)
    pos_cash_balances = pd.DataFrame({
        "sk_id_prev": pos_prev, "sk_id_curr": pos_curr, "months_balance": pos_month,
        "cnt_instalment": _with_missing(rng, rng.choice([6, 12, 24], q).astype(float), 0.003),
        "cnt_instalment_future": _with_missing(rng, rng.integers(0, 24, q).astype(float), 0.003),
        "name_contract_status": _pick(rng, ["Active", "Completed", "Signed"], q, [0.91, 0.08, 0.01]),
        "sk_dpd": np.where(rng.random(q) < 0.97, 0, rng.integers(1, 100, q)),
        "sk_dpd_def": np.where(rng.random(q) < 0.99, 0, rng.integers(1, 30, q)),
    })

    cards = rng.random(k) < 0.3
    cc_prev, cc_curr, cc_month = monthly(p_ids[cards], p_curr[cards], 20)
    c = len(cc_prev)
    limit = rng.choice([45000.0, 90000.0, 135000.0, 225000.0], c)
    balance = np.round(limit * rng.uniform(0, 1, c), 3)
    credit_card_balances = pd.DataFrame({
        "sk_id_prev": cc_prev, "sk_id_curr": cc_curr, "months_balance": cc_month,
        "amt_balance": balance, "amt_credit_limit_actual": limit,
        "amt_drawings_atm_current": _with_missing(rng, np.round(rng.exponential(3000, c), 1), 0.19),
        "amt_drawings_current": np.round(rng.exponential(5000, c), 1),
        "amt_inst_min_regularity": _with_missing(rng, np.round(balance * 0.05, 3), 0.08),
        "amt_payment_current": _with_missing(rng, np.round(rng.exponential(7000, c), 1), 0.19),
        "amt_payment_total_current": np.round(rng.exponential(6500, c), 1),
        "amt_receivable_principal": np.round(balance * 0.95, 3),
        "amt_total_receivable": balance,
        "cnt_drawings_current": rng.poisson(0.7, c),
        "cnt_instalment_mature_cum": _with_missing(rng, rng.integers(0, 60, c).astype(float), 0.08),
        "name_contract_status": _pick(rng, ["Active", "Completed", "Signed"], c, [0.96, 0.03, 0.01]),
        "sk_dpd": np.where(rng.random(c) < 0.96, 0, rng.integers(1, 100, c)),
        "sk_dpd_def": np.where(rng.random(c) < 0.98, 0, rng.integers(1, 30, c)),
    })

    in_prev, in_curr, in_number = monthly(p_ids, p_curr, 12)
    i = len(in_prev)
    day = -in_number * 30 - rng.integers(0, 2500, i)
    amount = np.round(rng.lognormal(9.0, 1.0, i), 3)
    installment_payments = pd.DataFrame({
        "sk_id_prev": in_prev, "sk_id_curr": in_curr,
        "num_instalment_version": rng.choice([0.0, 1.0, 2.0], i, p=[0.3, 0.65, 0.05]),
        "num_instalment_number": -in_number,
        "days_instalment": -day.astype(float),
        "days_entry_payment": _with_missing(rng, (-day - rng.integers(-5, 30, i)).astype(float), 0.0002),
        "amt_instalment": amount,
        "amt_payment": _with_missing(rng, np.round(amount * rng.choice([1.0, 1.0, 0.5], i), 3), 0.0002),
        "datetime": base - pd.to_timedelta(day, unit="D"),
    })

    folder.mkdir(parents=True, exist_ok=True)
    tables = {"applications.csv": applications, "bureau_balances.csv": bureau_balances, "bureaus.csv": bureaus,
              "credit_card_balances.csv": credit_card_balances, "installment_payments.csv": installment_payments,
              "pos_cash_balances.csv": pos_cash_balances, "previous_applications.csv": previous_applications}
    for name, frame in tables.items():
        frame.to_csv(folder / name, index=False)
    return {name: folder / name for name in tables}


# --- fraud_batch: credit cards, their holders and a few months of their transactions -------------------------

CITIES = [("New York", "US", 40.71, -74.01), ("Chicago", "US", 41.88, -87.63), ("Houston", "US", 29.76, -95.37),
          ("Phoenix", "US", 33.45, -112.07), ("San Diego", "US", 32.72, -117.16), ("Denver", "US", 39.74, -104.99),
          ("Boston", "US", 42.36, -71.06), ("Seattle", "US", 47.61, -122.33), ("Miami", "US", 25.76, -80.19),
          ("Toronto", "CA", 43.65, -79.38)]
CATEGORIES = ["Grocery", "Restaurant/Cafeteria", "Health/Beauty", "Domestic Transport", "Clothing",
              "Electronics", "Sports/Outdoors", "Holliday/Travel", "Jewelry", "Cash Withdrawal"]


def fraud_batch(folder: Path, rng: np.random.Generator, cards: int = 250, transactions: int = 12000) -> Files:
    cc_nums = np.unique(rng.integers(4_000_000_000_000_000, 4_999_999_999_999_999, cards, dtype=np.int64))
    cards = len(cc_nums)
    expires = [f"{month:02d}/{year % 100:02d}" for month, year in zip(rng.integers(1, 13, cards),
                                                                   rng.integers(2024, 2029, cards))]
    credit_cards = pd.DataFrame({"cc_num": cc_nums, "provider": _pick(rng, ["visa", "mastercard", "amex"], cards,
                                                                      [0.5, 0.4, 0.1]),
                                 "expires": expires})
    home = rng.integers(0, len(CITIES), cards)
    first = ["James", "Mary", "Robert", "Linda", "Michael", "Susan", "David", "Karen", "Anna", "Luis"]
    last = ["Smith", "Johnson", "Brown", "Garcia", "Miller", "Davis", "Lopez", "Wilson", "Moore", "Clark"]
    names = [f"{first[a]} {last[b]}" for a, b in zip(rng.integers(0, 10, cards), rng.integers(0, 10, cards))]
    profiles = pd.DataFrame({
        "name": names, "sex": _pick(rng, ["F", "M"], cards),
        "mail": [f"{name.lower().replace(' ', '.')}{i}@example.com" for i, name in enumerate(names)],
        "birthdate": (pd.Timestamp("1950-01-01") + pd.to_timedelta(rng.integers(0, 365 * 52, cards), unit="D")
                      + pd.to_timedelta(rng.integers(0, 86400, cards), unit="s")).strftime("%Y-%m-%d %H:%M:%S"),
        "City": [CITIES[h][0] for h in home], "Country": [CITIES[h][1] for h in home], "cc_num": cc_nums,
    })

    # Each card spends near home; a fraudulent transaction is larger, or far away, or both.
    start = pd.Timestamp("2022-01-01")
    card = rng.integers(0, cards, transactions)
    seconds = np.sort(rng.integers(0, 90 * 86400, transactions))
    fraud = rng.random(transactions) < 0.015
    place = np.where(fraud & (rng.random(transactions) < 0.6), rng.integers(0, len(CITIES), transactions),
                     home[card])
    amount = np.round(np.where(fraud, rng.lognormal(6.0, 1.0, transactions), rng.lognormal(3.5, 1.0,
                                                                                             transactions)), 2)
    trans = pd.DataFrame({
        "tid": [f"{rng.integers(0, 2**62):016x}{rng.integers(0, 2**62):016x}" for _ in range(transactions)],
        "datetime": (start + pd.to_timedelta(seconds, unit="s")).strftime("%Y-%m-%d %H:%M:%S"),
        "cc_num": cc_nums[card],
        "category": _pick(rng, CATEGORIES, transactions, [0.25, 0.15, 0.1, 0.1, 0.1, 0.08, 0.07, 0.05, 0.03,
                                                          0.07]),
        "amount": amount,
        "latitude": np.round([CITIES[p][2] for p in place] + rng.normal(0, 0.05, transactions), 6),
        "longitude": np.round([CITIES[p][3] for p in place] + rng.normal(0, 0.05, transactions), 6),
        "city": [CITIES[p][0] for p in place], "country": [CITIES[p][1] for p in place],
        "fraud_label": fraud.astype(int),
    })

    folder.mkdir(parents=True, exist_ok=True)
    tables = {"credit_cards.csv": credit_cards, "profiles.csv": profiles, "transactions.csv": trans}
    for name, frame in tables.items():
        frame.to_csv(folder / name, index=False)
    return {name: folder / name for name in tables}


# --- fraud_online: card holders and a quarter of their transactions, cash withdrawals the ones that count ---------

def fraud_online(folder: Path, rng: np.random.Generator, cards: int = 400, transactions: int = 24000) -> Files:
    """card_fraud_online's two files. The feature pipeline keeps only the cash withdrawals (about a sixth here)
    and the profiles of cards that made one; a card withdraws several times (its group's primary key repeats,
    one row per event time), fraud is a few percent of them (large, far from home), and a few rows lack their
    country (the pipeline fills them in). The training pipeline splits 2022-01-01..03-10 / 03-10..03-31."""
    cc_nums = np.unique(rng.integers(4_000_000_000_000_000, 4_999_999_999_999_999, cards, dtype=np.int64))
    cards = len(cc_nums)
    home = rng.integers(0, len(CITIES), cards)
    first = ["James", "Mary", "Robert", "Linda", "Michael", "Susan", "David", "Karen", "Anna", "Luis"]
    last = ["Smith", "Johnson", "Brown", "Garcia", "Miller", "Davis", "Lopez", "Wilson", "Moore", "Clark"]
    names = [f"{first[a]} {last[b]}" for a, b in zip(rng.integers(0, 10, cards), rng.integers(0, 10, cards))]
    profiles = pd.DataFrame({
        "name": names, "sex": _pick(rng, ["F", "M"], cards),
        "mail": [f"{name.lower().replace(' ', '.')}{i}@example.com" for i, name in enumerate(names)],
        "birthdate": (pd.Timestamp("1950-01-01") + pd.to_timedelta(rng.integers(0, 365 * 52, cards), unit="D")
                      + pd.to_timedelta(rng.integers(0, 86400, cards), unit="s")).strftime("%Y-%m-%d %H:%M:%S"),
        "City": [CITIES[h][0] for h in home], "Country": [CITIES[h][1] for h in home], "cc_num": cc_nums,
    })

    start = pd.Timestamp("2022-01-01")
    card = rng.integers(0, cards, transactions)
    seconds = np.sort(rng.integers(0, 90 * 86400, transactions))
    category = _pick(rng, CATEGORIES, transactions, [0.22, 0.14, 0.09, 0.09, 0.09, 0.07, 0.06, 0.04, 0.03, 0.17])
    cash = category == "Cash Withdrawal"
    fraud = rng.random(transactions) < np.where(cash, 0.05, 0.01)
    place = np.where(fraud & (rng.random(transactions) < 0.7), rng.integers(0, len(CITIES), transactions),
                     home[card])
    amount = np.round(np.where(fraud, rng.lognormal(6.0, 1.0, transactions),
                               rng.lognormal(3.5, 1.0, transactions)), 2)
    country = np.array([CITIES[p][1] for p in place], dtype=object)
    country[rng.random(transactions) < 0.01] = None
    trans = pd.DataFrame({
        "tid": [f"{rng.integers(0, 2**62):016x}{rng.integers(0, 2**62):016x}" for _ in range(transactions)],
        "datetime": (start + pd.to_timedelta(seconds, unit="s")).strftime("%Y-%m-%d %H:%M:%S"),
        "cc_num": cc_nums[card], "category": category, "amount": amount,
        "latitude": np.round([CITIES[p][2] for p in place] + rng.normal(0, 0.05, transactions), 6),
        "longitude": np.round([CITIES[p][3] for p in place] + rng.normal(0, 0.05, transactions), 6),
        "city": [CITIES[p][0] for p in place], "country": country,
        "fraud_label": fraud.astype(int),
    })

    folder.mkdir(parents=True, exist_ok=True)
    tables = {"profiles.csv": profiles, "transactions.csv": trans}
    for name, frame in tables.items():
        frame.to_csv(folder / name, index=False)
    return {name: folder / name for name in tables}


# --- nyc_taxi_fares: rides with their distance and time features, and their fares -----------------------------

def _miles(lat1: np.ndarray, lon1: np.ndarray, lat2: np.ndarray, lon2: np.ndarray) -> np.ndarray:
    lat1, lon1, lat2, lon2 = (np.radians(v) for v in (lat1, lon1, lat2, lon2))
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 3958.8 * 2 * np.arcsin(np.sqrt(a))


def nyc_taxi_fares(folder: Path, rng: np.random.Generator, rides: int = 500) -> Files:
    ride_ids = [f"{rng.integers(0, 2**62):016x}{rng.integers(0, 2**62):016x}" for _ in range(rides)]
    pickup_ms = rng.integers(1577883600, 1610000000, rides) * 1000
    coords = {"pickup_longitude": rng.uniform(-74.5, -72.8, rides), "pickup_latitude": rng.uniform(40.5, 41.8, rides),
              "dropoff_longitude": rng.uniform(-74.5, -72.8, rides),
              "dropoff_latitude": rng.uniform(40.5, 41.8, rides)}
    coords = {name: np.round(values, 5) for name, values in coords.items()}
    frame = pd.DataFrame({"ride_id": ride_ids, "pickup_datetime": pickup_ms, **coords,
                          "passenger_count": rng.integers(1, 5, rides), "taxi_id": rng.integers(1, 201, rides),
                          "driver_id": rng.integers(1, 201, rides)})
    frame["distance"] = _miles(frame.pickup_latitude, frame.pickup_longitude, frame.dropoff_latitude,
                               frame.dropoff_longitude)
    for airport, (lon, lat) in {"jfk": (-73.7781, 40.6413), "ewr": (-74.1745, 40.6895),
                                "lgr": (-73.8740, 40.7769)}.items():
        frame[f"pickup_distance_to_{airport}"] = _miles(lat, lon, frame.pickup_latitude, frame.pickup_longitude)
        frame[f"dropoff_distance_to_{airport}"] = _miles(lat, lon, frame.dropoff_latitude, frame.dropoff_longitude)
    when = pd.to_datetime(frame.pickup_datetime, unit="ms")
    frame["year"], frame["weekday"], frame["hour"] = when.dt.year, when.dt.weekday, when.dt.hour
    # tolls and total_fare are floats in the real file: the feature pipeline casts its new fares to float64 to match
    fares = pd.DataFrame({"taxi_id": frame.taxi_id, "driver_id": frame.driver_id,
                          "tolls": rng.integers(0, 6, rides).astype(float),
                          "total_fare": np.round(3 + 2.5 * frame.distance + rng.integers(0, 20, rides)),
                          "ride_id": ride_ids})
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "rides500.csv")       # the real files keep pandas' index as their first column
    fares.to_csv(folder / "fares500.csv")
    return {"rides500.csv": folder / "rides500.csv", "fares500.csv": folder / "fares500.csv"}


# --- loan_approval: Lending Club loans and their applicants (parquet), and the data dictionary ---------------

def loan_approval(folder: Path, rng: np.random.Generator, loans: int = 4000) -> Files:
    n = loans
    ids = np.arange(n)
    months = pd.date_range("2012-01-01", "2016-12-01", freq="MS")
    issued = months[rng.integers(0, len(months), n)]
    grade = _pick(rng, list("ABCDEFG"), n, [0.17, 0.29, 0.27, 0.16, 0.08, 0.025, 0.005])
    sub_grade = np.array([g + str(s) for g, s in zip(grade, rng.integers(1, 6, n))], dtype=object)
    rate = np.round(5.3 + (np.array([ord(g) for g in grade]) - 65) * 4 + rng.uniform(0, 4, n), 2)
    amount = rng.integers(20, 1400, n) * 25.0
    term = _pick(rng, [" 36 months", " 60 months"], n, [0.76, 0.24])
    instalment = np.round(amount * (rate / 1200) / (1 - (1 + rate / 1200) ** -np.where(term == " 36 months", 36,
                                                                                        60)), 2)
    charged_off = rng.random(n) < 0.08 + 0.03 * (np.array([ord(g) for g in grade]) - 65)
    streets = ["Main St", "Oak Ave", "Pine Rd", "Maple Dr", "Cedar Ln"]
    states = ["AP", "AE", "CA", "TX", "NY", "FL", "OH"]
    zips = ["22690", "05113", "00813", "11650", "30723", "70466", "29597", "48052", "86630", "93700"]
    address = [f"{rng.integers(1, 9999)} {streets[rng.integers(0, 5)]}\r\nTown, {states[rng.integers(0, 7)]} "
               f"{zips[rng.integers(0, 10)]}" for _ in range(n)]
    loans_df = pd.DataFrame({
        "id": ids, "loan_amnt": amount, "term": term, "int_rate": rate, "installment": instalment,
        "grade": grade, "sub_grade": sub_grade, "issue_d": issued.strftime("%b-%Y"),
        "loan_status": np.where(charged_off, "Charged Off", "Fully Paid"),
        "purpose": _pick(rng, ["debt_consolidation", "credit_card", "home_improvement", "other", "major_purchase"],
                         n, [0.59, 0.21, 0.06, 0.1, 0.04]),
        "title": _with_missing(rng, _pick(rng, ["Debt consolidation", "Credit card refinancing", "Home improvement",
                                                "Other"], n), 0.004),
        "initial_list_status": _pick(rng, ["f", "w"], n, [0.6, 0.4]),
        "application_type": _pick(rng, ["INDIVIDUAL", "JOINT", "DIRECT_PAY"], n, [0.998, 0.001, 0.001]),
        "address": address,
    })
    opened = issued - pd.to_timedelta(rng.integers(3 * 365, 30 * 365, n), unit="D")
    # most applicants have 2-59 accounts, a few up to 150; mort_acc is missing only among the former, as the
    # pipeline's fill_mort_acc looks the mean up by position (a total above the number of distinct totals fails)
    total_acc = np.where(rng.random(n) < 0.97, rng.integers(2, 60, n), rng.integers(60, 151, n)).astype(float)
    applicants_df = pd.DataFrame({
        "id": ids,
        "emp_title": _with_missing(rng, _pick(rng, ["Teacher", "Manager", "Registered Nurse", "Driver", "Supervisor"],
                                              n), 0.06),
        "emp_length": _with_missing(rng, _pick(rng, ["< 1 year", "1 year", "2 years", "3 years", "5 years",
                                                     "10+ years"], n), 0.05),
        "home_ownership": _pick(rng, ["MORTGAGE", "RENT", "OWN", "OTHER", "NONE", "ANY"], n,
                                [0.5, 0.4, 0.095, 0.003, 0.001, 0.001]),
        "annual_inc": np.round(rng.lognormal(11.0, 0.5, n), 0),
        "verification_status": _pick(rng, ["Verified", "Source Verified", "Not Verified"], n),
        "dti": np.round(rng.gamma(4, 4.3, n), 2),
        "earliest_cr_line": (opened.to_period("M").to_timestamp()).strftime("%b-%Y"),
        "open_acc": rng.integers(1, 40, n).astype(float),
        "pub_rec": rng.choice([0.0, 1.0, 2.0], n, p=[0.85, 0.13, 0.02]),
        "revol_bal": rng.integers(0, 60000, n).astype(float),
        "revol_util": _with_missing(rng, np.round(rng.uniform(0, 110, n), 1), 0.001),
        "total_acc": total_acc,
        "mort_acc": np.where(total_acc < 60, _with_missing(rng, rng.integers(0, 8, n).astype(float), 0.095),
                             rng.integers(0, 8, n)),
        "pub_rec_bankruptcies": _with_missing(rng, rng.choice([0.0, 1.0], n, p=[0.88, 0.12]), 0.0014),
    })
    dictionary = pd.DataFrame({
        "LoanStatNew": ["loan_amnt", "term", "int_rate", "installment", "grade", "sub_grade", "emp_title",
                        "emp_length", "home_ownership", "annual_inc", "verification_status", "issue_d",
                        "loan_status", "purpose", "title", "dti", "earliest_cr_line", "open_acc", "pub_rec",
                        "revol_bal", "revol_util", "total_acc", "initial_list_status", "application_type",
                        "mort_acc", "pub_rec_bankruptcies", "desc"],
        "Description": ["The listed amount of the loan applied for by the borrower."] * 27,
    })
    folder.mkdir(parents=True, exist_ok=True)
    files = {"loans-{}.parquet": folder / "loans.parquet", "applicants-{}.parquet": folder / "applicants.parquet",
             "loans.parquet": folder / "loans.parquet", "applicants.parquet": folder / "applicants.parquet",
             "LCDataDictionary.csv": folder / "LCDataDictionary.csv"}
    loans_df.to_parquet(folder / "loans.parquet", index=False)
    applicants_df.to_parquet(folder / "applicants.parquet", index=False)
    dictionary.to_csv(folder / "LCDataDictionary.csv", index=False)
    return files


GENERATORS: dict[str, Callable[[Path, np.random.Generator], Files]] = {
    "churn": churn, "credit_scores": credit_scores, "fraud_batch": fraud_batch, "fraud_online": fraud_online,
    "online_inference_benchmark": fraud_online,
    "nyc_taxi_fares": nyc_taxi_fares, "loan_approval": loan_approval,
}
