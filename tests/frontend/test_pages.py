def test_it_sends_anonymous_visitors_to_the_login_page(client, db):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")
    page = client.get("/login/")
    assert page.status_code == 200
    assert b"Sign in" in page.content


def test_it_signs_in_and_shows_the_users_departments(client, world):
    response = client.post("/login/", {"username": "carol", "password": world.password}, follow=True)
    html = response.content.decode()
    assert "Welcome, carol" in html
    assert "Computer Vision" in html and "Department admin" in html
    assert "Natural Language Processing" not in html


def test_it_says_what_is_wrong_with_a_failed_sign_in(client, world):
    response = client.post("/login/", {"username": "carol", "password": "wrong"})
    assert response.status_code == 200
    assert "That username and password do not match an account" in response.content.decode()


def test_it_speaks_simplified_chinese(client, world):
    client.force_login(world.bob)
    response = client.get("/", HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 200
    assert 'lang="zh-hans"' in response.content.decode()
