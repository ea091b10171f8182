async def test_an_agent_with_a_schedule_can_be_run_now(api):
    agent = (await api.post("/v1/agents", json={"name": "reporter", "tools": ["demo.get_record"]})).json()
    schedule = await api.post("/v1/schedules", json={"agent_id": agent["id"], "cron": "0 9 * * *"})
    assert schedule.status_code == 201, schedule.text
    run = await api.post(f"/v1/schedules/{schedule.json()['id']}/run-now")
    assert run.status_code == 202
    assert run.json()["trigger_type"] == "schedule" and run.json()["trigger_source"] == "manual"
