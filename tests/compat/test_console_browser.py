"""The web console in a real headless browser (Debian's chromium through selenium) against
a real broker process: the pages load without console errors, show the topics, the group's
lag and charts with data points, the message browser shows produced records as text, JSON
and hex, and the views update live. Screenshots are saved as test artefacts
(tests/support/browser.py) for people to look at."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select
from support.broker import BrokerProcess
from support.browser import artifacts_dir, chromium, chromium_missing, console_errors, wait_for

pytestmark = pytest.mark.skipif(chromium_missing() is not None,
                                reason=chromium_missing() or "")

TOPIC, GROUP = "orders", "billing"
PRODUCED = 120  # 40 a partition
COMMITTED = {0: 40, 1: 20, 2: 20}
CONSUMED = sum(COMMITTED.values())  # a lag of PRODUCED - CONSUMED


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("console-browser"), {
        "http.listeners": "http://127.0.0.1:0",
        "http.console.history.interval.ms": "250"}).start()
    bootstrap = process.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 3, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(PRODUCED):
        producer.produce(TOPIC, key=f"order-{i}".encode(),
                         value=json.dumps({"id": i, "item": "book", "qty": i % 5}).encode(),
                         headers=[("source", b"browser-test")], partition=i % 3)
    assert producer.flush(30) == 0
    # The group has read all of partition 0 and half of the others: CONSUMED in all.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in COMMITTED.items()],
                    asynchronous=False)
    consumer.close()
    yield process
    process.stop()
    assert "Traceback" not in process.log_text()


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def shots() -> Any:
    folder = artifacts_dir("console")

    def save(driver: WebDriver, name: str) -> None:
        driver.save_screenshot(str(folder / f"{name}.png"))
    return save


def api(broker: BrokerProcess, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.http_port}/api/{path}",
                                timeout=30) as response:
        return json.loads(response.read())


def open_view(driver: WebDriver, broker: BrokerProcess, fragment: str) -> None:
    driver.get(f"http://127.0.0.1:{broker.http_port}/#{fragment}")
    wait_for(driver, lambda d: d.find_element(By.TAG_NAME, "body")
             .get_attribute("data-loaded") == "true", f"the view {fragment} rendered")


def chart_points(driver: WebDriver, chart: str) -> int:
    element = driver.find_element(By.CSS_SELECTOR, f'.chart[data-chart="{chart}"]')
    return int(element.get_attribute("data-points") or 0)


def no_errors(driver: WebDriver) -> None:
    errors = console_errors(driver)
    assert not errors, errors


@pytest.fixture(scope="module")
def traffic(broker: BrokerProcess) -> Iterator[None]:
    """Produce a little all along, so that the charts have rates to draw."""
    stop = threading.Event()

    def run() -> None:
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        while not stop.wait(0.1):
            producer.produce("traffic", value=b"x" * 200)
            producer.poll(0)
        producer.flush(10)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(15)


def test_overview_shows_the_broker_and_charts(broker: BrokerProcess, browser: WebDriver,
                                              traffic: None, shots: Any) -> None:
    open_view(browser, broker, "/")
    table = browser.find_element(By.ID, "brokers-table")
    assert f"127.0.0.1:{broker.port}" in table.text
    wait_for(browser, lambda d: chart_points(d, "bytes") > 2, "the bytes chart has points")
    shots(browser, "overview")
    no_errors(browser)


def test_topics_and_a_topics_partitions(broker: BrokerProcess, browser: WebDriver,
                                        shots: Any) -> None:
    open_view(browser, broker, "/topics")
    row = wait_for(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f'#topics-table tr[data-topic="{TOPIC}"]'), "the orders row")
    assert str(PRODUCED) in row.text.replace(",", "")  # its message count
    shots(browser, "topics")
    row.find_element(By.TAG_NAME, "a").click()
    partitions = wait_for(browser, lambda d: d.find_element(By.ID, "topic-partitions"),
                          "the partitions table")
    wait_for(browser, lambda d: len(partitions.find_elements(By.CSS_SELECTOR, "tbody tr")) == 3,
             "three partitions")
    assert "cleanup.policy" in browser.find_element(By.ID, "topic-configs").text
    shots(browser, "topic")
    no_errors(browser)


def test_message_browser_shows_records_as_json_and_hex(broker: BrokerProcess,
                                                       browser: WebDriver, shots: Any) -> None:
    open_view(browser, broker, f"/topics/{TOPIC}")
    form = wait_for(browser, lambda d: d.find_element(By.ID, "mb-form"), "the message browser")
    Select(form.find_element(By.ID, "mb-mode")).select_by_value("offset")
    Select(form.find_element(By.ID, "mb-partition")).select_by_value("1")
    offset = form.find_element(By.ID, "mb-offset")
    offset.clear()
    offset.send_keys("5")
    limit = form.find_element(By.ID, "mb-limit")
    limit.clear()
    limit.send_keys("3")
    Select(form.find_element(By.ID, "mb-format")).select_by_value("json")
    form.find_element(By.ID, "mb-load").click()
    # Partition 1 holds ids 1, 4, 7...: offset 5 is id 16.
    record = wait_for(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, '#mb-records tr[data-partition="1"][data-offset="5"]'),
        "the record at offset 5 of partition 1")
    assert '"id": 16' in record.text and "order-16" in record.text, record.text
    assert len(browser.find_elements(By.CSS_SELECTOR, "#mb-records tr[data-offset]")) == 3
    shots(browser, "messages-json")
    Select(browser.find_element(By.ID, "mb-format")).select_by_value("hex")
    expected_hex = b'{"id": 16'.hex()
    wait_for(browser, lambda d: expected_hex in d.find_element(
        By.CSS_SELECTOR, '#mb-records tr[data-partition="1"][data-offset="5"]').text
        .replace(" ", "").lower(), "the value in hex")
    no_errors(browser)


def test_group_lag_and_its_chart(broker: BrokerProcess, browser: WebDriver,
                                 shots: Any) -> None:
    described = api(broker, f"groups/{GROUP}")
    assert described["lag"] == PRODUCED - CONSUMED
    open_view(browser, broker, "/groups")
    row = wait_for(browser, lambda d: d.find_element(
        By.CSS_SELECTOR, f'#groups-table tr[data-group="{GROUP}"]'), "the group's row")
    assert str(PRODUCED - CONSUMED) in row.text
    shots(browser, "groups")
    open_view(browser, broker, f"/groups/{GROUP}")
    wait_for(browser, lambda d: d.find_element(By.ID, "group-lag").text.strip()
             .replace(",", "") == str(PRODUCED - CONSUMED), "the total lag")
    for offsets in described["offsets"]:
        cell = browser.find_element(By.CSS_SELECTOR,
                                    f'#group-offsets tr[data-topic="{TOPIC}"]'
                                    f'[data-partition="{offsets["partition"]}"] .lag')
        assert cell.text.strip() == str(offsets["lag"])
    wait_for(browser, lambda d: chart_points(d, "lag") > 1, "the lag chart has points")
    shots(browser, "group")
    no_errors(browser)


def test_views_update_without_reloading(broker: BrokerProcess, browser: WebDriver) -> None:
    open_view(browser, broker, "/topics")
    row = f'#topics-table tr[data-topic="{TOPIC}"]'
    wait_for(browser, lambda d: d.find_element(By.CSS_SELECTOR, row), "the orders row")
    browser.execute_script("window.__notReloaded = true")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(30):
        producer.produce(TOPIC, value=b"more %d" % i)
    assert producer.flush(30) == 0
    wait_for(browser, lambda d: str(PRODUCED + 30) in d.find_element(
        By.CSS_SELECTOR, row).text.replace(",", ""), "the new message count", timeout=30)
    assert browser.execute_script("return window.__notReloaded") is True
    no_errors(browser)
